"""The fleet view: everything that shows many runs at once, reading only OUT.

- `read`: load the latest health rows, `steps` and example completions from OUT.
- `status`: the terminal table (`rlstream status`), worst run first, and its JSON.
- `svg`, `report`: the self-contained HTML report (`rlstream report`).
- `prometheus`: the `/metrics` endpoint of `rlstream watch --metrics-port`.

Nothing here changes OUT or the runs; the report alone reads run folders, and only a
few transcripts of runs with a degenerate_outputs or entropy_collapse finding.
"""
