"""The control loop's rooms (handlers.py, kopf, calls them; the import contract `reconcile-rooms`
in pyproject.toml keeps their order):

- `cycle`: one control-loop cycle of a CR, its phases in order (observe → decide → act → drain →
  report), the back-off after a failure, recommend-only mode.
- `delete`: the finalizer's pass (let a drain finish or hand its remainder back) and the adoption
  of a remainder a deleted CR left.
- `report`: the status a cycle computed, when it is written, the controller's memory, metrics.
- `drain`: the cycle's part of the drain hand-off (the executor in act/drain.py does the I/O).
- `act`: the consumer Deployment (create, scale, pause). `observe`: the cycle's Kafka view.
- `deps`: the inputs every room shares (GroupRef, Deps, Cache, the Kube protocol).
"""
