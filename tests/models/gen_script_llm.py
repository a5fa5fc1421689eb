#!/usr/bin/python3
"""Write a "script" decoder: a model that answers one known prompt with a fixed list of token
ids, whatever sampling asks (its logits put 30 on the scripted id and 0 elsewhere), then the
end-of-sequence id. Tests of what the worker does with a given answer (tool calls parsed out of
it) need a model that writes that answer; the random-weight tiny decoder never would.

Usage:  /usr/bin/python3 tests/models/gen_script_llm.py MODEL_ONNX PROMPT_LEN ID[,ID...]

The answer is keyed by position: the logits at position p (position_ids) are those of
script[p + 1 - PROMPT_LEN] (clipped to [0, len]; the last entry is EOS), so a prompt of exactly
PROMPT_LEN tokens gets the script from its first generated token on. Optimum's
text-generation-with-past signature (gen_llm_model.py's: 1 layer, 2 KV heads of 16, vocabulary
32000), its present the past with zeros appended: the worker's KV cache and batching work as
for any decoder. Only model.onnx is written: copy the rest of a tiny model's folder beside it."""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from gen_llm_model import EOS, HEAD_DIM, IR_VERSION, KV_HEADS, OPSET, VOCAB


def build(prompt_len, script):
    table = np.array(list(script) + [EOS], dtype=np.int64)
    inits = [
        numpy_helper.from_array(table, "script"),
        numpy_helper.from_array(np.array(1 - prompt_len, dtype=np.int64), "offset"),
        numpy_helper.from_array(np.array(0, dtype=np.int64), "lo"),
        numpy_helper.from_array(np.array(len(table) - 1, dtype=np.int64), "hi"),
        numpy_helper.from_array(np.array(VOCAB, dtype=np.int64), "depth"),
        numpy_helper.from_array(np.array([0.0, 30.0], dtype=np.float32), "onehot_values"),
        numpy_helper.from_array(np.array([1, 3], dtype=np.int64), "axes13"),
        numpy_helper.from_array(np.array([1, KV_HEADS, 1, HEAD_DIM], dtype=np.int64), "kv_expand"),
    ]
    nodes = [
        helper.make_node("Add", ["position_ids", "offset"], ["idx0"]),
        helper.make_node("Clip", ["idx0", "lo", "hi"], ["idx"]),
        helper.make_node("Gather", ["script", "idx"], ["next_ids"], axis=0),
        helper.make_node("OneHot", ["next_ids", "depth", "onehot_values"], ["logits"], axis=-1),
        # the new keys and values: zeros [B, KV_HEADS, S, HEAD_DIM] (attention_mask is read too,
        # so the graph uses every input)
        helper.make_node("Cast", ["input_ids"], ["ids_f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["ids_f", "zero"], ["zeros_bs"]),
        helper.make_node("Unsqueeze", ["zeros_bs", "axes13"], ["zeros_b1s1"]),
        helper.make_node("Expand", ["zeros_b1s1", "kv_expand"], ["new_kv"]),
        helper.make_node("ReduceSum", ["attention_mask"], ["mask_sum"], keepdims=0),
        helper.make_node("Cast", ["mask_sum"], ["mask_f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["mask_f", "zero"], ["mask_zero"]),
        helper.make_node("Add", ["new_kv", "mask_zero"], ["new_kv2"]),
    ]
    inits.append(numpy_helper.from_array(np.array(0.0, dtype=np.float32), "zero"))
    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch_size", "total_sequence_length"]),
        helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
    ]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch_size", "sequence_length", VOCAB])]
    for kind in ("key", "value"):
        inputs.append(helper.make_tensor_value_info(f"past_key_values.0.{kind}", TensorProto.FLOAT,
                                                    ["batch_size", KV_HEADS, "past_sequence_length", HEAD_DIM]))
        outputs.append(helper.make_tensor_value_info(f"present.0.{kind}", TensorProto.FLOAT,
                                                     ["batch_size", KV_HEADS, "total_sequence_length", HEAD_DIM]))
        nodes.append(helper.make_node("Concat", [f"past_key_values.0.{kind}", "new_kv2"], [f"present.0.{kind}"],
                                      axis=2))
    graph = helper.make_graph(nodes, "script_llm", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="tierserve-gen")
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model


def main(argv):
    if len(argv) != 4:
        raise SystemExit(__doc__)
    onnx.save(build(int(argv[2]), [int(x) for x in argv[3].split(",")]), argv[1])


if __name__ == "__main__":
    main(sys.argv)
