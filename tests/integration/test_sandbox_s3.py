"""The sandbox's S3 server: each sandbox's store is its own, and its process goes with it.

moto keeps one S3 per process, so a server thread would have shared its objects with every other
sandbox of the same process: a test suite's second sandbox found the artifact the first compiled, ran
no compile Job and posted no CompileSucceeded. Each ``SandboxS3`` is a process of its own.
"""

from __future__ import annotations

import asyncio

import pytest

from fixtures_cluster import answers
from neuronfleet.sandbox.s3 import SandboxS3


def bucket_names(s3: SandboxS3) -> list[str]:
    return [bucket["Name"] for bucket in s3.client().list_buckets()["Buckets"]]


def put(s3: SandboxS3, bucket: str, key: str) -> None:
    s3.ensure_bucket(bucket)
    s3.client().put_object(Bucket=bucket, Key=key, Body=b"compiled")


async def test_two_sandboxes_of_one_process_do_not_share_objects() -> None:
    first = await SandboxS3().start()
    try:
        await asyncio.to_thread(put, first, "neuronfleet-artifacts", "compiled/bert/manifest.json")
        second = await SandboxS3().start()
        try:
            assert second.endpoint_url != first.endpoint_url
            assert await asyncio.to_thread(bucket_names, second) == []
            # The same bucket name is free in the second: S3's bucket names are global only within one store.
            await asyncio.to_thread(put, second, "neuronfleet-artifacts", "other")
            assert await asyncio.to_thread(bucket_names, first) == ["neuronfleet-artifacts"]
        finally:
            await second.stop()
    finally:
        await first.stop()
    # A sandbox started after both have gone starts empty too.
    third = await SandboxS3().start()
    try:
        assert await asyncio.to_thread(bucket_names, third) == []
    finally:
        await third.stop()


async def test_the_server_process_exits_at_stop() -> None:
    s3 = await SandboxS3().start()
    assert await answers(s3.endpoint_url)
    # Exited after its stdin closed, not killed at the stop's timeout.
    assert await s3.stop() == 0
    assert not await answers(s3.endpoint_url)
    assert await s3.stop() is None  # a second stop is harmless: nothing runs


async def test_a_taken_port_is_an_error_naming_it_not_a_hang(held_port: int) -> None:
    s3 = SandboxS3(port=held_port)
    with pytest.raises(OSError, match=rf"did not start on 127\.0\.0\.1:{held_port}") as raised:
        await s3.start()
    assert "exited with code 1" in str(raised.value)
    assert await s3.stop() is None  # the failed start left nothing running
