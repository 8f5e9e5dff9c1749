"""The fleet view: everything that shows many runs at once, reading only OUT.

- `read`: load the latest health rows, `steps` and example completions from OUT.
- `status`: the terminal table (`rlstream status`), worst run first, and its JSON.
- `svg`, `report`: the self-contained HTML report (`rlstream report`).
- `prometheus`: the `/metrics` endpoint of `rlstream watch --metrics-port`.

Nothing here changes the runs or reads their folders, and nothing reads a resume
state: the fleet view reads OUT's tables (example completions and kept transcripts
come from `OUT/samples`).
"""
