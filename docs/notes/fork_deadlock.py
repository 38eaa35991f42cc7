"""Does this Python's `os.fork` deadlock the child when other threads enter Python at the same moment?
(CPython gh-112275; the reason `mixer_lightning.data.sampling.worker_options` starts DataLoader workers by
spawn under DDP on the Pythons `fork_may_deadlock` names.)

Native threads call a Python function over and over (ctypes: each call creates and deletes a thread state,
taking the interpreter's thread-list lock without the GIL, as gloo's threads do when they drop a tensor),
while the main thread forks children that exit at once; a child alive after 2 s is deadlocked.

    python docs/notes/fork_deadlock.py 10000

Measured on the 2-core machine (2026-11-28): 3.11.7 40 of 10000 (and 4 of 3000), 3.10.13 3 of 10000,
3.12.1 0 of 3000. Linux only (libc's pthread_create through ctypes).
"""

import ctypes
import os
import sys
import threading
import time

libc = ctypes.CDLL(None)
BODY = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)
body = BODY(lambda arg: None)  # run in each new native thread: PyGILState_Ensure, then Release


def churn() -> None:
    thread = ctypes.c_ulong()
    while True:
        libc.pthread_create(ctypes.byref(thread), None, body, None)
        libc.pthread_join(thread, None)


def main(forks: int) -> None:
    for _ in range(4):
        threading.Thread(target=churn, daemon=True).start()
    hung, start = 0, time.time()
    for _ in range(forks):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        for _ in range(200):
            if os.waitpid(pid, os.WNOHANG)[0]:
                break
            time.sleep(0.01)
        else:
            hung += 1
            os.kill(pid, 9)
            os.waitpid(pid, 0)
    print(
        f"python {sys.version.split()[0]}: {hung} of {forks} forked children deadlocked ({time.time() - start:.0f} s)"
    )
    sys.stdout.flush()
    os._exit(0)  # not the interpreter's finalisation, which the native threads would crash


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3000)
