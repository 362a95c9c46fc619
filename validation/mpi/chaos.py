"""chaos.py: runs one training job to its end through a chain of interruptions drawn
from a seed, as a preempted and crashing cluster would: each session is stopped after
a random time by one of

    term_rank    SIGTERM to one rank (Slurm's preemption or scancel reaching a task)
    term_all     SIGTERM to every rank at once (Slurm signals all tasks of the step)
    usr1_mpirun  SIGUSR1 to mpirun, which passes it on (--signal=USR1@T, by hand)
    term_mpirun  SIGTERM to mpirun: it passes it on about 2 s later (OpenMPI 4.1
                 here) and exits with 1, whether or not the ranks checkpointed in time
    kill_rank    SIGKILL to one rank (its node failed)
    crash        SIGKILL to mpirun and every rank at once (the whole node failed)
    kill_mpirun  SIGKILL to mpirun alone (the launcher's node failed, or the OOM killer
                 chose it): its ranks must go too

(a signal for a rank while not every rank has started goes to mpirun instead: SIGUSR1
for term_rank and term_all, crash for kill_rank) and started again with the same
command, until a session ends by itself; then one more session runs uninterrupted if
the chain of CUTS interruptions ran out first.

    /usr/bin/python3 chaos.py SEED CUTS SPAN OUT_PREFIX -- mpirun -np N TRAINER ARGS...

SPAN: the seconds an uninterrupted run took (the straight one). A session is stopped
mostly once metrics.csv reaches a step drawn ahead of the newest checkpoint (from 1
to twice the run's steps over CUTS + 1) and up to 60 ms later (in that step, its
evaluation, sample or checkpoint), and otherwise within SPAN / 4 of its launch (the
start-up, perhaps before the signal handlers are installed). OUT_PREFIX: session K's
stdout and stderr go to OUT_PREFIX.K.out and .err.

After each session it checks what the README promises: no warning or error from the
trainer (a checkpoint skipped on resume, say), but that best.h5 holds a step past the
one resumed from (an evaluation between the newest checkpoint and a kill); the exit
code (75 where every rank signalled had its handler installed when a stop signal
came, 1 (README) or 75 for SIGTERM to mpirun, one other than 75 where a rank was
killed or died of a signal that came before its handler; 0 only for a run that said
"done:", whose last stop check the signal missed), a stop's "checkpointed at step"
line, and no rank of the job left running 10 s after mpirun ended (OpenMPI ends the
ranks of a killed mpirun after about 1 s; the margin is for a loaded machine).
A rank is this job's when its environment holds the TR_TEST_TAG this process got
(lib.sh), so that tests side by side are not touched. Prints one line per session
and, last, "chaos: N interruptions (ACTION x COUNT ...), M sessions"; exits 1 on the
first failed check (the sessions' files stay for the caller to show)."""
import os
import random
import re
import signal
import subprocess
import sys
import time


def fail(msg):
    print("chaos: FAIL: " + msg, flush=True)
    sys.exit(1)


def job_pids(tag, exe):
    """{pid: world rank} of this job's ranks (command line starting with exe)."""
    found = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                argv0 = f.read().split(b"\0")[0].decode(errors="replace")
            if argv0 != exe:
                continue
            with open("/proc/%s/environ" % d, "rb") as f:
                env = f.read().split(b"\0")
        except OSError:  # gone, or not ours to read
            continue
        if ("TR_TEST_TAG=" + tag).encode() not in env:
            continue
        found[int(d)] = launcher_rank(env)
    return found


def launcher_rank(env):
    """a rank's number as its launcher set it in its environment (Open MPI, PMIx,
    MPICH's Hydra), -1 where none did"""
    for var in (b"OMPI_COMM_WORLD_RANK=", b"PMIX_RANK=", b"PMI_RANK="):
        rank = [e for e in env if e.startswith(var)]
        if rank:
            return int(rank[0][len(var):])
    return -1


def catches(pid, sig):
    """whether pid has a handler for sig (SigCgt of /proc/PID/status)"""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    except OSError:
        pass
    return False


def newest_step(run_dir):
    """the step of the newest checkpoint file in RUN/checkpoints (0: none)"""
    try:
        names = os.listdir(os.path.join(run_dir, "checkpoints"))
    except OSError:
        return 0
    steps = [int(m.group(1)) for m in map(re.compile(r"step_(\d+)\.h5$").match, names) if m]
    return max(steps, default=0)


def identity(path):
    """(inode, size) of a file, None where there is none"""
    try:
        st = os.stat(path)
        return st.st_ino, st.st_size
    except OSError:
        return None


def renewed(path, before):
    """whether a session has opened metrics.csv, whose identity was `before` at its
    launch: a resumed run renames a copy cut back to its checkpoint into place (another
    inode), a fresh one truncates it (smaller) or creates it"""
    now = identity(path)
    return now is not None and (before is None or now[0] != before[0] or now[1] < before[1])


def last_step(run_dir):
    """the step of metrics.csv's last whole row (0: none yet)"""
    try:
        with open(os.path.join(run_dir, "metrics.csv"), "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(f.tell() - 256, 0))
            tail = f.read().decode(errors="replace")
        row = tail[:tail.rindex("\n")].rsplit("\n", 1)[-1]
        return int(row.split(",")[0])
    except (OSError, ValueError):
        return 0


ACTIONS = [("term_rank", 30), ("term_all", 15), ("usr1_mpirun", 15), ("term_mpirun", 10),
           ("kill_rank", 15), ("crash", 15), ("kill_mpirun", 10)]


def main():
    seed, cuts, span, prefix = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    cmd = sys.argv[sys.argv.index("--") + 1:]
    exe = cmd[cmd.index("-np") + 2]
    np_ = int(cmd[cmd.index("-np") + 1])
    steps = int([a for a in cmd if a.startswith("train.steps=")][-1].split("=")[1])
    run_dir = [a for a in cmd if a.startswith("run.dir=")][-1].split("=", 1)[1]
    tag = os.environ["TR_TEST_TAG"]
    env = dict(os.environ)
    # mpirun's own grace before it kills the ranks on SIGTERM, as users have it
    # (lib.sh sets 0 for the error cases' sake)
    env.pop("OMPI_MCA_odls_base_sigkill_timeout", None)
    rng = random.Random(seed)
    tally = {}
    session = 0
    while True:
        session += 1
        cut = session <= cuts
        action = rng.choices([a for a, _ in ACTIONS], [w for _, w in ACTIONS])[0]
        # when: mostly a step drawn ahead of the newest checkpoint (as many steps on
        # average as spread the cuts over the run) and then up to 60 ms more (inside
        # that step, its evaluation, sample or checkpoint); sometimes a time within
        # the first quarter of what a whole run takes (the start-up, the first steps)
        early = rng.random() < 0.15
        target = newest_step(run_dir) + rng.randint(1, max(2 * steps // (cuts + 1), 1))
        delay = rng.uniform(0, span / 4) if early else rng.uniform(0, 0.06)
        victim_draw = rng.random()
        out, err = "%s.%d.out" % (prefix, session), "%s.%d.err" % (prefix, session)
        with open(out, "w") as fo, open(err, "w") as fe:
            metrics = os.path.join(run_dir, "metrics.csv")
            before = identity(metrics)
            t0 = time.monotonic()
            p = subprocess.Popen(cmd, stdout=fo, stderr=fe, env=env)
            sent, caught = None, True
            if cut:
                try:
                    while not early and p.poll() is None and (
                            not renewed(metrics, before) or last_step(run_dir) < target):
                        time.sleep(0.005)
                    p.wait(timeout=delay)
                except subprocess.TimeoutExpired:
                    ranks = job_pids(tag, exe)
                    if action in ("term_rank", "kill_rank", "term_all") and len(ranks) < np_:
                        action = "usr1_mpirun" if action != "kill_rank" else "crash"
                    pids = sorted(ranks, key=ranks.get)
                    sig = signal.SIGTERM
                    if action in ("kill_rank", "crash", "kill_mpirun"):
                        sig = signal.SIGKILL
                    elif action == "usr1_mpirun":
                        sig = signal.SIGUSR1
                    # the handler in place in the ranks signalled (mpirun: all of
                    # them): a stop signal must checkpoint
                    caught = len(ranks) == np_ and all(catches(q, sig) for q in pids)
                    if action in ("term_rank", "kill_rank"):
                        targets = [pids[int(victim_draw * len(pids))]]
                        sent = "%s to rank %d" % (action, ranks[targets[0]])
                        caught = catches(targets[0], sig)
                    elif action == "term_all":
                        targets, sent = pids, "SIGTERM to every rank"
                    elif action == "crash":
                        targets, sent = [p.pid] + pids, "SIGKILL to mpirun and every rank"
                    else:
                        targets, sent = [p.pid], "%s to mpirun" % signal.Signals(sig).name
                    delivered = False  # to a process still there
                    for q in targets:
                        try:
                            os.kill(q, sig)
                            delivered = True
                        except ProcessLookupError:
                            pass
                    sent += " after %.2f s" % (time.monotonic() - t0)
            try:
                rc = p.wait(timeout=120)
            except subprocess.TimeoutExpired:
                for q in [p.pid] + list(job_pids(tag, exe)):
                    os.kill(q, signal.SIGKILL)
                fail("session %d (%s) did not end within 120 s" % (session, sent))
        ended = time.monotonic()
        while job_pids(tag, exe):
            if time.monotonic() - ended > 10:
                fail("session %d (%s): ranks %s still running 10 s after mpirun ended" %
                     (session, sent, sorted(job_pids(tag, exe))))
            time.sleep(0.02)
        text = open(out, errors="replace").read()
        done = re.search(r"^done: ", text, re.M) is not None
        stop = re.search(r"^(SIG\w+|signal): checkpointed at step (\d+)", text, re.M)
        where = "at step %s" % stop.group(2) if stop else "newest checkpoint %d" % newest_step(
            run_dir)
        print("session %d: %s -> exit %d, %s" % (session, sent or "uninterrupted", rc,
                                                  "done" if done else where), flush=True)
        if rc == 0 and not done:
            fail("session %d: exit 0 without 'done:'" % session)
        # the trainer's warnings and errors: none, but a best.h5 of a step past the one
        # resumed from (its evaluation came after the newest checkpoint, before a kill);
        # a checkpoint skipped on resume would be one made visible before it was whole
        said = [l for l in (text + open(err, errors="replace").read()).splitlines()
                if re.match(r"(warning|error): ", l) and
                not re.search(r"best\.h5 holds step \d+'s model, past the step resumed from", l)]
        if said:
            fail("session %d: %s" % (session, " | ".join(said)[:2000]))
        if rc == 0 or sent is None:
            if rc != 0:
                fail("session %d: uninterrupted, exit %d: %s" %
                     (session, rc, open(err, errors="replace").read()[-2000:]))
            break
        tally[action] = tally.get(action, 0) + 1
        why = open(err, errors="replace").read()[-2000:]
        if rc == 75 and not stop:
            fail("session %d: %s: exit 75 without 'checkpointed at step': %s" % (session, sent, why))
        if action in ("kill_rank", "crash", "kill_mpirun"):
            if delivered and rc in (0, 75):
                fail("session %d: %s: exit %d, where a rank was killed" % (session, sent, rc))
        elif action == "term_mpirun":
            # README: mpirun passes it on, kills the ranks a second or two later and
            # exits with 1; 75 where the ranks were quicker
            if rc not in (1, 75):
                fail("session %d: %s: exit %d (1 or 75 expected): %s" % (session, sent, rc, why))
        elif caught and rc != 75:
            fail("session %d: %s: exit %d (75 and 'checkpointed at step' expected): %s" %
                 (session, sent, rc, why))
        # (a stop signal before a rank's handler: that rank dies of it, unless mpirun
        # passed it on after the handler was in place)
    n = sum(tally.values())
    print("chaos: %d interruptions (%s), %d sessions" %
          (n, ", ".join("%s x %d" % kv for kv in sorted(tally.items())), session), flush=True)


if __name__ == "__main__":
    main()
