/* parity_llm: `tierbench parity --llm`, the quality gate between two LLMs served over /v1
 * (a quantized model against its FP32 original, one tier against another).
 *
 * For each prompt of a corpus (a text file, one prompt per line) both sides complete it
 * greedily (temperature 0, ignore_eos, logprobs 5) through POST /v1/completions. Position by
 * position, while both have seen the same text: top-1 agreement (the same greedy token) and
 * the log-probability error (|target - baseline| over the tokens in both top-5 lists; the
 * log-softmax of the logits, so a logit error up to the row's constant). At the first
 * disagreement both sides are re-asked with the prompt plus the baseline's text up to and
 * including its token there (teacher forcing), at most --resumes times per prompt (16), so one
 * early divergence does not hide the rest of the answer. Held to --min-top1, --max-abs and
 * --mean-abs; exit codes those of parity.h. See docs/llm.md, "Quantized CPU tier". */
#ifndef TS_PARITY_LLM_H
#define TS_PARITY_LLM_H

/* argv[1] is "parity" and one argument is "--llm". Returns one of parity.h's exit codes. */
int parity_llm_main(int argc, char **argv);

#endif
