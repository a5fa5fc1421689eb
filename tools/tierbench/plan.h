/* plan: `tierbench plan`, the cheapest fleet and policy that meets per-priority SLOs on a trace.
 *
 * The candidates are a fixed grid over the knobs named by --axis (a pool's min/max backends,
 * reserved = min; its scaler target; the policy's marks; any `tierbench sim` option such as
 * the admission timeouts and reserves), on the base fleet of --config. Each candidate is one
 * `tierbench sim` run (sim_run: the router's own policy library), so nothing models the policy
 * twice. The grid does not depend on the SLOs, so a tighter SLO can only remove candidates:
 * it never yields a cheaper plan. The grid is bounded by --budget (a larger grid is refused
 * before anything runs). Same trace, config, grid and seed: the same bytes in every file.
 *
 * SLOs are upper bounds: PRIO.refused (share not served), PRIO.p95_ms / p99_ms, cost,
 * stage_changes, and, against a reference fleet run once (--ref), PRIO.p95_x (P95 within
 * this multiple of the reference's) and cost_x (cost within this share of the reference's).
 * Outputs under --out: router.yaml (tierrouter's own config), overlay/ (a kustomize overlay
 * on deploy/k8s/base with the pools' HPAs set to the plan), report.md and day.svg.
 */
#ifndef TS_PLAN_H
#define TS_PLAN_H

int plan_main(int argc, char **argv);

#endif
