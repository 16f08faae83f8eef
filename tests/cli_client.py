"""``fxflow ARGS`` through a running ``tests/cli_zygote.py``: the shell's streams, working directory
and environment go to a child forked there, and its exit code comes back as ours.

Run as ``python -S tests/cli_client.py ARGS`` with ``FXFLOW_ZYGOTE`` set to the zygote's socket:
it imports only the standard library, so it starts in milliseconds.
"""
import json
import os
import socket
import sys


def run(path: str, args: list[str], cwd: str, env: dict[str, str], fds: list[int],
        timeout: float | None = None) -> tuple[int, int]:
    """Run ``fxflow ARGS`` in the zygote at ``path`` on ``fds`` (stdin, stdout, stderr): (pid, exit code).

    A timeout raises :class:`TimeoutError` after killing the run."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.connect(path)
        request = json.dumps({"args": args, "cwd": cwd, "env": env}).encode() + b"\n"
        socket.send_fds(connection, [request], fds)
        answers = connection.makefile("rb")
        pid = json.loads(answers.readline())["pid"]
        connection.settimeout(timeout)
        try:
            line = answers.readline()
        except (TimeoutError, socket.timeout):
            os.kill(pid, 9)
            raise TimeoutError(f"fxflow {' '.join(args)} ran past {timeout} s") from None
        if not line:
            raise RuntimeError("the fxflow zygote closed the connection")
        return pid, json.loads(line)["code"]


if __name__ == "__main__":
    _, code = run(os.environ["FXFLOW_ZYGOTE"], sys.argv[1:], os.getcwd(), dict(os.environ), [0, 1, 2])
    sys.exit(code)
