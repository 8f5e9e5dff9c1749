"""Runtime tests share the session services of tests/conftest.py (`ray_session`,
`s3_server`, `s3_requests`); nothing is defined here."""
