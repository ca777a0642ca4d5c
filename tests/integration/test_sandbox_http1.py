"""The lean HTTP/1.1 of the sandbox's router and the demo's client (``sandbox.http1``) over real sockets.

The server side is driven by raw bytes (what it must accept: keep-alive, pipelining, chunked bodies,
``Expect: 100-continue``; what it must refuse: garbage, a body over the limit) and by aiohttp's
client (an independent implementation); the client side against aiohttp's server and against
servers that misbehave on purpose.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from neuronfleet.sandbox import http1


async def echo(request: http1.Request) -> http1.Response:
    """What the server read: method, target, body length, a header; JSON."""
    return http1.Response.json(
        200,
        {
            "method": request.method,
            "target": request.target.decode(),
            "body": request.body.decode(),
            "x_test": (request.header(b"x-test") or b"").decode(),
        },
    )


@pytest.fixture
async def echo_server() -> AsyncIterator[tuple[str, int]]:
    server = await http1.serve(echo, "127.0.0.1", 0, max_body_bytes=1024)
    host, port = server.sockets[0].getsockname()[:2]
    yield host, port
    server.close()


async def raw(address: tuple[str, int], data: bytes, *, answers: int = 1) -> list[tuple[int, bytes, bytes]]:
    """Write ``data`` on one connection and read ``answers`` answers: (status, head, body) each."""
    reader, writer = await asyncio.open_connection(*address)
    writer.write(data)
    out = []
    try:
        for _ in range(answers):
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            status = int(head.split(b" ", 2)[1])
            if status == 100:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
                out.append((100, b"", b""))
                status = int(head.split(b" ", 2)[1])
            length = next(
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            out.append((status, head, await reader.readexactly(length)))
    finally:
        writer.close()
    return out


async def test_keep_alive_requests_share_one_connection_and_aiohttp_reads_the_answers(
    echo_server: tuple[str, int],
) -> None:
    pool = http1.ConnectionPool()
    request = http1.encode_request("POST", b"/v2/x?y=1", "h", [(b"X-Test", b"a")], b"hello")
    for _ in range(20):
        response = await pool.exchange(*echo_server, request, 5)
        assert response.status == 200
        assert json.loads(response.body) == {"method": "POST", "target": "/v2/x?y=1", "body": "hello", "x_test": "a"}
    assert pool.opened == 1
    answers = await asyncio.gather(*(pool.exchange(*echo_server, request, 5) for _ in range(5)))
    assert {a.status for a in answers} == {200}
    assert pool.opened <= 5  # the idle one is reused; at most one per request in flight
    pool.close()

    host, port = echo_server
    async with aiohttp.ClientSession() as session:
        for _ in range(3):
            async with session.post(f"http://{host}:{port}/p", data=b"from aiohttp", headers={"X-Test": "b"}) as r:
                assert r.status == 200
                assert await r.json() == {"method": "POST", "target": "/p", "body": "from aiohttp", "x_test": "b"}


async def test_pipelined_chunked_and_expect_continue_requests_are_read_whole(echo_server: tuple[str, int]) -> None:
    pipelined = b"GET /one HTTP/1.1\r\nHost: h\r\n\r\nGET /two HTTP/1.1\r\nHost: h\r\n\r\n"
    first, second = await raw(echo_server, pipelined, answers=2)
    assert json.loads(first[2])["target"] == "/one" and json.loads(second[2])["target"] == "/two"

    chunked = b"POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
    [(status, _, body)] = await raw(echo_server, chunked)
    assert status == 200 and json.loads(body)["body"] == "abcde"

    reader, writer = await asyncio.open_connection(*echo_server)
    writer.write(b"POST /e HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n")
    assert (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)).startswith(b"HTTP/1.1 100 ")
    writer.write(b"body")
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert head.startswith(b"HTTP/1.1 200 ")
    writer.close()


async def test_garbage_is_a_400_and_a_body_over_the_limit_a_413_then_the_connection_closes(
    echo_server: tuple[str, int],
) -> None:
    [(status, head, body)] = await raw(echo_server, b"NOT HTTP AT ALL\r\n\r\n")
    assert status == 400 and b"Connection: close" in head and "not an HTTP/1.1 request" in json.loads(body)["error"]

    big = b"POST /b HTTP/1.1\r\nHost: h\r\nContent-Length: 2048\r\n\r\n" + b"x" * 2048
    [(status, _, body)] = await raw(echo_server, big)
    assert status == 413 and "larger than 1024 bytes" in json.loads(body)["error"]

    chunks = b"".join(b"100\r\n" + b"y" * 256 + b"\r\n" for _ in range(5)) + b"0\r\n\r\n"
    [(status, _, _)] = await raw(
        echo_server, b"POST /b HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks
    )
    assert status == 413  # no Content-Length to check up front: counted as it arrives


async def test_a_request_that_cannot_be_read_is_refused_after_the_ones_before_it() -> None:
    async def slow_echo(request: http1.Request) -> http1.Response:
        await asyncio.sleep(0.2)
        return await echo(request)

    server = await http1.serve(slow_echo, "127.0.0.1", 0, max_body_bytes=1024)
    try:
        answers = await raw(
            server.sockets[0].getsockname()[:2], b"GET /first HTTP/1.1\r\nHost: h\r\n\r\nGARBAGE\r\n\r\n", answers=2
        )
    finally:
        server.close()
    assert [status for status, _, _ in answers] == [200, 400]
    assert json.loads(answers[0][2])["target"] == "/first"


async def test_a_head_answer_has_no_body_and_may_carry_the_length_a_get_would_have() -> None:
    async def sized(request: http1.Request) -> http1.Response:
        if request.method == "HEAD":
            return http1.Response(200, [(b"Content-Length", b"10")])  # as the router passes it on
        return http1.Response(200, [], b"x" * 10)

    server = await http1.serve(sized, "127.0.0.1", 0, max_body_bytes=1024)
    reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname()[:2])
    try:
        writer.write(b"HEAD / HTTP/1.1\r\nHost: h\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.lower().count(b"content-length") == 1 and b"Content-Length: 10" in head
        get = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)  # no body bytes in between
        assert get.startswith(b"HTTP/1.1 200 ") and await reader.readexactly(10) == b"x" * 10
    finally:
        writer.close()
        server.close()


async def test_a_head_answered_with_a_body_says_its_length_and_sends_none_of_it() -> None:
    # A handler that answers HEAD as it would GET (the router's own 503, a 404): the length is the
    # body's, and the body stays out, or the next answer on the connection would start inside it.
    async def missing(request: http1.Request) -> http1.Response:
        return http1.Response(404, [], b"nope")

    server = await http1.serve(missing, "127.0.0.1", 0, max_body_bytes=1024)
    reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname()[:2])
    try:
        writer.write(b"HEAD /a HTTP/1.1\r\nHost: h\r\n\r\nGET /a HTTP/1.1\r\nHost: h\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 404 ") and b"Content-Length: 4\r\n" in head
        get = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert get.startswith(b"HTTP/1.1 404 ") and await reader.readexactly(4) == b"nope"
    finally:
        writer.close()
        server.close()


async def test_the_client_tells_no_connection_from_no_answer_and_from_a_timeout() -> None:
    pool = http1.ConnectionPool()
    request = http1.encode_request("POST", b"/", "h", [], b"{}")
    free = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = free.sockets[0].getsockname()[1]
    free.close()
    await free.wait_closed()
    with pytest.raises(http1.ConnectFailed):
        await pool.exchange("127.0.0.1", port, request, 5)

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.close()

    async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()

    for handler, error in ((hang_up, http1.NoAnswer), (never_answer, TimeoutError)):
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        with pytest.raises(error):
            await pool.exchange("127.0.0.1", server.sockets[0].getsockname()[1], request, 0.5)
        server.close()
    pool.close()


async def test_the_client_reuses_only_connections_the_server_keeps_and_reads_head_answers() -> None:
    async def answer(request: web.Request) -> web.Response:
        close = request.query.get("close") == "1"
        return web.Response(text="x" * 10, headers={"Connection": "close"} if close else None)

    app = web.Application()
    app.router.add_get("/", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    pool = http1.ConnectionPool()
    try:
        for _ in range(3):
            assert (
                await pool.exchange("127.0.0.1", port, b"GET /?close=1 HTTP/1.1\r\nHost: h\r\n\r\n", 5)
            ).body == b"x" * 10
        assert pool.opened == 3
        head = await pool.exchange("127.0.0.1", port, b"HEAD / HTTP/1.1\r\nHost: h\r\n\r\n", 5, head=True)
        assert head.status == 200 and head.body == b"" and head.header(b"content-length") == b"10"
        get = await pool.exchange("127.0.0.1", port, b"GET / HTTP/1.1\r\nHost: h\r\n\r\n", 5)
        assert get.body == b"x" * 10  # on a new connection: the HEAD's is retired
        assert pool.opened == 5
    finally:
        pool.close()
        await runner.cleanup()
