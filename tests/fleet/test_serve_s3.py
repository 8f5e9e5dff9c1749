"""The live pages on an OUT on S3 (moto's server on 127.0.0.1, real HTTP): the same
fleet, run and compare pages as from the same OUT on local disk, and a refresh of the
fleet page costs no more S3 requests than `rlstream status`."""

from __future__ import annotations

import json
import os
import re
from urllib.parse import quote

import boto3
import pytest

from rlstream.cli import main
from rlstream.fleet.web import FleetPages


@pytest.fixture(scope="module")
def s3_out(fleet_out, s3_server):
    client = boto3.client("s3", endpoint_url=s3_server)
    bucket = f"serve-{os.getpid()}"
    client.create_bucket(Bucket=bucket)
    for dirpath, _, files in os.walk(fleet_out.out):
        for f in files:
            path = os.path.join(dirpath, f)
            client.upload_file(path, bucket, f"out/{os.path.relpath(path, fleet_out.out)}")
    return f"s3://{bucket}/out"


def _body(pages: FleetPages, target: str) -> str:
    status, _, body = pages.handle(target)
    assert status == 200, body[:300]
    # a run's age ("updated") and the newest row's are now minus a time: they move
    # between reads (their times, data-epoch, do not)
    text = re.sub(r'data-v="\d{5,}\.\d+"', 'data-v="age"', body.decode())
    return re.sub(r'(class="(?:n )?age"[^>]*>)[^<]*<', r"\1age<", text)


def test_pages_from_s3_are_the_pages_from_local_disk(fleet_out, s3_out):
    local, remote = FleetPages(str(fleet_out.out), refresh=0), FleetPages(s3_out, refresh=0)
    a, b = fleet_out.run_ids["healthy"], fleet_out.run_ids["mismatch_kl_rising"]
    for target in ("/", f"/run?id={quote(b)}", f"/compare?id={quote(a)}&id={quote(b)}"):
        got = _body(remote, target)
        assert got == _body(local, target), target
    assert got.count("<tr><td>") == 9 and "<svg" in _body(remote, f"/run?id={quote(b)}")


def test_a_fleet_refresh_costs_what_status_costs(s3_out, s3_requests, capsys):
    pages = FleetPages(s3_out, refresh=0)  # every poll reads OUT again
    pages.handle("/api/version")
    before = len(s3_requests())
    pages.handle("/api/version")
    poll = len(s3_requests()) - before
    before = len(s3_requests())
    assert main(["status", s3_out, "--json"]) == 0
    status = len(s3_requests()) - before
    assert len(json.loads(capsys.readouterr().out)["runs"]) == 4
    assert 0 < poll <= status
