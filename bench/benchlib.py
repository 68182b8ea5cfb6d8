"""Helpers shared by the Python benchmarks in bench/ (each run as
`python3 bench/NAME.py`, so this folder is on sys.path)."""
import threading


def run_together(fns):
    """Calls every function of fns at the same time, each in its own
    thread; returns their results in order once all have ended, or raises
    the first error any of them raised (after all have ended)."""
    out, errs = [None] * len(fns), []

    def one(i):
        try:
            out[i] = fns[i]()
        except BaseException as e:  # reported after all ended
            errs.append(e)

    th = [threading.Thread(target=one, args=(i,)) for i in range(len(fns))]
    for t in th:
        t.start()
    for t in th:
        t.join()
    if errs:
        raise errs[0]
    return out
