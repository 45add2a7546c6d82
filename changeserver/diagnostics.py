"""``GET /diagnostics/stack``: every thread's stack, then every asyncio task's, as text."""

from __future__ import annotations

import asyncio
import io
import sys
import threading
import traceback


def stacks() -> str:
    """A dump for a stuck server: the replication thread's stack, the waiting long polls."""
    out = io.StringIO()
    names = {thread.ident: thread for thread in threading.enumerate()}
    for ident, frame in sys._current_frames().items():
        thread = names.get(ident)
        name = thread.name if thread is not None else "unknown"
        daemon = " daemon" if thread is not None and thread.daemon else ""
        out.write(f"thread {name} ({ident}){daemon}:\n")
        out.write("".join(traceback.format_stack(frame)))
        out.write("\n")
    try:
        tasks = asyncio.all_tasks()
    except RuntimeError:  # no running loop in this thread
        tasks = set()
    for task in sorted(tasks, key=lambda task: task.get_name()):
        task.print_stack(file=out)  # "Stack for <Task ...>", then its frames
        out.write("\n")
    return out.getvalue()
