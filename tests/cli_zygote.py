"""A pre-forked ``python -m fxflow``: imports torch and fxflow once, then forks a child per CLI run.

Every CLI test used to pay ~2.5 s of ``import torch`` in a fresh interpreter; a fork of this process
starts with it done. Each child is still a process of its own, with its own working directory,
environment, argv, stdin, stdout and stderr, running ``fxflow`` exactly as ``python -m fxflow`` does
(``runpy`` with ``sys.path[0]`` set to the working directory), and its exit code is the CLI's.

``python tests/cli_zygote.py SOCKET`` listens on the Unix socket SOCKET, says ``ready`` on stdout,
and serves until its stdin closes. A client (``tests/cli_client.py``, or the tests' conftest)
connects and sends one JSON line ``{"args", "cwd", "env"}`` with its stdin, stdout and stderr
attached (SCM_RIGHTS); the answer is a line ``{"pid"}``, then a line ``{"code"}``. Variables the
interpreter reads only as it starts (``PYTHONHASHSEED``...) are the zygote's own: start one per set.
"""
from __future__ import annotations

import json
import os
import runpy
import select
import signal
import socket
import sys
import traceback

import torch  # noqa: F401  (the point: imported once, before any fork)
from zoo.vision_ops import define_nms_if_missing

define_nms_if_missing()  # as conftest.py does: a check of a transformers model imports torchvision

import fxflow.cli  # noqa: F401
import fxflow.render  # noqa: F401


def _exit_code(error: SystemExit) -> int:
    """What the interpreter makes of ``SystemExit(code)``."""
    if error.code is None:
        return 0
    if isinstance(error.code, int):
        return error.code
    print(error.code, file=sys.stderr)
    return 1


def _run_child(request: dict, fds: list[int]) -> None:
    """In the forked child: become ``python -m fxflow ARGS`` on the client's streams and exit with its code."""
    code = 1
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = ["fxflow", *request["args"]]
        sys.path[0] = os.getcwd()  # as ``python -m`` puts the working directory first
        try:
            runpy.run_module("fxflow", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as error:
            code = _exit_code(error)
    except BaseException:  # noqa: BLE001  (a crash is the child's exit status, as in a real process)
        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        os._exit(code)


def _serve(connection: socket.socket, listener: socket.socket) -> None:
    """One client: fork its run, answer its pid, then its exit code."""
    with connection:
        message, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
        reader = connection.makefile("rb")
        line = message if message.endswith(b"\n") else message + reader.readline()
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            listener.close()
            connection.close()
            _run_child(request, fds)
        for fd in fds:
            os.close(fd)
        connection.sendall(json.dumps({"pid": pid}).encode() + b"\n")
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        connection.sendall(json.dumps({"code": code if code >= 0 else 128 - code}).encode() + b"\n")


def main(path: str) -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(8)
    print("ready", flush=True)
    while True:
        ready, _, _ = select.select([listener, sys.stdin], [], [])
        if sys.stdin in ready and not sys.stdin.readline():
            break  # whoever started us is gone
        if listener in ready:
            connection, _ = listener.accept()
            try:
                _serve(connection, listener)
            except (OSError, ValueError):
                traceback.print_exc()  # one client gone wrong; the next may still be served
    listener.close()
    os.unlink(path)


if __name__ == "__main__":
    main(sys.argv[1])
