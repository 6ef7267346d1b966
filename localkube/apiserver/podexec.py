"""`pods/exec` over WebSocket: the v4/v5 channel protocols bridged to a process on the host.

The kubelet half builds the host command that enters the container's namespaces
(`localkube.kubelet.exec.build_exec_command`); this module spawns it with pipes and relays
channels 0 (stdin), 1 (stdout), 2 (stderr), 255 (v5 close), then reports the exit code on
channel 3 the way the real API server does. A pod on a simulated node (state.json says
`simulated`) has no process to enter: its command runs in this process against the pod's
simulated filesystem (localkube/hollow/shell.py), over the same WebSocket protocol.
"""

from __future__ import annotations

import asyncio
import json

from aiohttp import WSMsgType, web

from localkube.apiserver import errors
from localkube.apiserver.podlogs import pod_dir, read_pod_state

PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io", "channel.k8s.io")
STDIN, STDOUT, STDERR, STATUS, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255


def _builder():
    # Imported late: the kubelet half owns it, and the API server must start without it.
    from localkube.kubelet.exec import ContainerNotRunning, build_exec_command

    return build_exec_command, ContainerNotRunning


def exit_status(returncode: int, command: list[str]) -> dict:
    if returncode == 0:
        return {"metadata": {}, "status": "Success"}
    return {
        "metadata": {},
        "status": "Failure",
        "message": f"command terminated with non-zero exit code: error executing command "
        f"[{' '.join(command)}], exit code {returncode}",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(returncode)}]},
    }


async def serve_exec(request: web.Request, pod: dict, state_dir: str) -> web.StreamResponse:
    query = request.rel_url.query
    command = query.getall("command", [])
    if not command:
        raise errors.bad_request("you must specify at least 1 command")
    container = query.get("container") or ""
    names = [c["name"] for c in (pod.get("spec") or {}).get("containers") or []]
    if not container:
        container = names[0] if names else ""
    name = pod["metadata"]["name"]
    if request.headers.get("Upgrade", "").lower() != "websocket":
        raise errors.bad_request("Upgrade request required")
    if read_pod_state(state_dir, pod["metadata"]["uid"]).get("simulated"):
        return await serve_simulated_exec(request, pod, state_dir, container, list(command))
    build, not_running = _builder()
    try:
        argv, env, cwd = build(state_dir, pod["metadata"]["uid"], container, list(command))
    except not_running:
        raise errors.bad_request(
            f'unable to upgrade connection: container not found ("{container}")'
        ) from None
    if container not in names and container not in [
        c["name"] for c in pod["spec"].get("initContainers") or []
    ]:
        raise errors.bad_request(f"container {container} is not valid for pod {name}")
    want_stdin = query.get("stdin", "false").lower() in ("true", "1")
    ws = web.WebSocketResponse(protocols=PROTOCOLS, autoping=True, max_msg_size=0)
    await ws.prepare(request)
    v5 = ws.ws_protocol == "v5.channel.k8s.io"
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            env=env,
            cwd=cwd,
            stdin=asyncio.subprocess.PIPE if want_stdin else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as error:
        await ws.send_bytes(bytes([STDERR]) + f"exec failed: {error}\n".encode())
        await ws.send_bytes(bytes([STATUS]) + json.dumps(exit_status(126, command)).encode())
        await ws.close()
        return ws

    async def pump(stream: asyncio.StreamReader, channel: int) -> None:
        while True:
            chunk = await stream.read(65536)
            if not chunk:
                return
            await ws.send_bytes(bytes([channel]) + chunk)

    async def read_client() -> None:
        async for message in ws:
            if message.type not in (WSMsgType.BINARY, WSMsgType.TEXT):
                continue
            data = message.data if isinstance(message.data, bytes) else message.data.encode()
            if not data:
                continue
            channel, payload = data[0], data[1:]
            if channel == STDIN and process.stdin is not None and payload:
                process.stdin.write(payload)
                await process.stdin.drain()
            elif channel == CLOSE and v5 and payload[:1] == bytes([STDIN]) and process.stdin:
                process.stdin.close()
        if process.stdin is not None and not process.stdin.is_closing():
            process.stdin.close()

    client = asyncio.ensure_future(read_client())
    try:
        await asyncio.gather(pump(process.stdout, STDOUT), pump(process.stderr, STDERR))
        returncode = await process.wait()
        await ws.send_bytes(bytes([STATUS]) + json.dumps(exit_status(returncode, command)).encode())
    except (ConnectionResetError, RuntimeError):
        pass
    finally:
        client.cancel()
        if process.returncode is None:
            process.kill()
            await process.wait()
        await ws.close()
    return ws


async def serve_simulated_exec(
    request: web.Request, pod: dict, state_dir: str, container: str, command: list[str]
) -> web.StreamResponse:
    """Exec into a hollow pod's container: the command runs in the simulated shell."""
    from localkube.hollow.podfs import build_root
    from localkube.hollow.shell import run_command

    uid = pod["metadata"]["uid"]
    entry = (read_pod_state(state_dir, uid).get("containers") or {}).get(container) or {}
    if not entry.get("running"):
        raise errors.bad_request(
            f'unable to upgrade connection: container not found ("{container}")'
        )
    ws = web.WebSocketResponse(protocols=PROTOCOLS, autoping=True, max_msg_size=0)
    await ws.prepare(request)
    outcome = await asyncio.to_thread(
        run_command,
        build_root(str(pod_dir(state_dir, uid))),
        command,
        entry.get("env") or {},
        entry.get("workingDir") or "/",
        pod["metadata"]["name"],
    )
    try:
        if outcome.stdout:
            await ws.send_bytes(bytes([STDOUT]) + bytes(outcome.stdout))
        if outcome.stderr:
            await ws.send_bytes(bytes([STDERR]) + bytes(outcome.stderr))
        await ws.send_bytes(
            bytes([STATUS]) + json.dumps(exit_status(outcome.code, command)).encode()
        )
    except (ConnectionResetError, RuntimeError):
        pass
    finally:
        await ws.close()
    return ws
