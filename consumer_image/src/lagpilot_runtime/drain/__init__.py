"""The drain (docs/drain.md): job (`lagpilot drain`, the Spark driver: parts, passes, the summary),
plan (the DrainPlan the operator writes, pure), task (a Spark task: one sub-range through the
handler), progress (the drain's progress groups), spark (the Spark session and its listeners),
runtime (the warm drain runtime). This module imports nothing."""
