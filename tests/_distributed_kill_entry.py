"""torchrun entry for tests/test_distributed_generate.py: `lowbit-video` whose rank 1 is SIGKILLed
right after it writes its first run (a crashed node); torchrun then stops the other ranks."""

import os
import signal

from lowbit_video import generate as gen

_write_run = gen.write_run


def write_run(run, clip, *, meta):
    out = _write_run(run, clip, meta=meta)
    if os.environ.get("RANK") == "1":
        os.kill(os.getpid(), signal.SIGKILL)
    return out


gen.write_run = write_run

if __name__ == "__main__":
    from lowbit_video.cli import main

    main()
