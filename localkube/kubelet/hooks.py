"""postStart and preStop lifecycle hooks (exec handlers; httpGet on the pod's IP).

A hook runs inside the container exactly like `kubectl exec` (see exec.py).
It returns None on success or a message naming the exit code / error, which
the kubelet turns into a FailedPostStartHook / FailedPreStopHook event.
"""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp

from localkube.kubelet.exec import ContainerNotRunning, build_exec_command


async def run_hook(
    state_dir: str,
    pod_uid: str,
    container: str,
    handler: dict,
    pod_ip: str | None,
    timeout_s: float,
) -> str | None:
    if "exec" in handler:
        command = handler["exec"].get("command") or []
        try:
            argv, env, cwd = build_exec_command(state_dir, pod_uid, container, command)
        except (ContainerNotRunning, ValueError) as exc:
            return str(exc)
        proc = await asyncio.create_subprocess_exec(
            *argv,
            env=env,
            cwd=cwd,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            output, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            return f"command {command!r} timed out after {timeout_s:.0f} s"
        if proc.returncode != 0:
            tail = output.decode(errors="replace")[-500:]
            return f"command {command!r} exited with {proc.returncode}: {tail}"
        return None
    if "httpGet" in handler:
        get = handler["httpGet"]
        host = get.get("host") or pod_ip or "127.0.0.1"
        scheme = (get.get("scheme") or "HTTP").lower()
        url = f"{scheme}://{host}:{get.get('port')}{get.get('path') or '/'}"
        try:
            async with aiohttp.ClientSession() as session:
                async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
                    if resp.status >= 400:
                        return f"Get {url}: HTTP {resp.status}"
        except (TimeoutError, aiohttp.ClientError) as exc:
            return f"Get {url}: {exc}"
        return None
    if "sleep" in handler:
        await asyncio.sleep(min(float(handler["sleep"].get("seconds") or 0), timeout_s))
        return None
    return f"unsupported lifecycle handler {sorted(handler)}; allowed: exec, httpGet, sleep"


def find_hook(container: dict | None, kind: str) -> dict | None:
    """The container's `kind` lifecycle handler (postStart, preStop), if it declares one."""
    return ((container or {}).get("lifecycle") or {}).get(kind)


def describe_hook_failure(kind: str, error: str) -> tuple[str, str]:
    """The event (reason, message) for a failed `kind` hook, e.g. FailedPostStartHook."""
    title = kind[:1].upper() + kind[1:]
    return f"Failed{title}Hook", f"{title}Hook failed: {error}"
