#!/usr/bin/env python3
"""check_launch.py: checks the launch files of dev/launch; run by tests/launch/test_launch.sh
from the repository root (needs Debian's python3-yaml and a built ./train_sft).

For every Kubernetes manifest: apiVersion and kind, and the fields its operator needs
(replica specs, container names, restart policies, images, GPU limits, the shared
volume, runtimeRef, numNodes, slotsPerWorker, ...), as read in the operators' sources
(the manifests' comments name the files).

For every launch file, scripts and manifests alike: the one trainer command line is
found in it, the number of ranks W it starts is worked out from the launcher's own
settings (mpirun -np, torchrun --nnodes x --nproc_per_node, #SBATCH --nodes x
--ntasks-per-node, the replicas of a manifest), and then:
- the GPU trainer suits the launcher: train_sftcu_mpi under mpirun (it takes the NCCL id
  over MPI, so the line passes no MASTER_ADDR and no -f), train_sftcu elsewhere (under
  srun with MASTER_ADDR exported or -f DIR);
- -d is a multiple of B*T*W (the trainer refuses anything else; the script checks it
  here because it runs the trainer as one process);
- the first start, with no checkpoint yet, runs with -y 0 and every later start with
  -y 1 (the trainer refuses -y 1 without a checkpoint): -y takes $RESUME, set by the
  guard line that looks for $OUT/latest, and -o is $OUT;
- the trainer accepts the command line: the CPU trainer ./train_sft runs it as one
  process on the shipped demo data, twice, a fresh start (-y 0) and a resume (-y 1),
  one optimizer step each, and must exit 0. The CPU and GPU trainers share their
  flags (COMMON_FLAGS and check_train_args in train/trainer.h), so a flag or value
  either refuses is refused here; a flag only the GPU trainer knows (-r) would be
  refused too (the shipped files use none). What is substituted, and why: the paths
  (-i -j -e -k -E -o -f) by the demo files and a temporary directory; -e by a fresh
  1-layer model with the file's context length, -d by B*T (one micro-batch) and -x by
  1 and 2, so each run is one small step. The values of every other flag are the
  file's own. For PyTorchJob and TrainJob the trainer runs in the environment the
  operator gives the first pod (its variables as the operator's sources set them, for
  a job of one pod, then the script's own exports), so the trainer's reading of that
  environment is checked too.
Prints one line per check: "ok NAME", "FAIL NAME: why" or "skip NAME: why".
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

import yaml

HERE = "dev/launch"
TRAINERS = ("train_sftcu", "train_sftcu_mpi", "train_sft_mpi", "train_sft")
PATH_FLAGS = ("-i", "-j", "-e", "-k", "-E", "-o", "-f")
# the launch environment of the runs below is cleared of these, so the trainer runs as one process
LAUNCHER_ENV = re.compile(r"^(OMPI_|PMI|PMIX_|SLURM_|PET_)|^(RANK|WORLD_SIZE|LOCAL_RANK|MASTER_ADDR|MASTER_PORT|SFT_RDZV_PORT)$")
RESUME_GUARD = re.compile(r'^\s*RESUME=0; \[ -f "\$OUT/latest" \] && RESUME=1\s*$', re.M)

failures = 0


def report(ok, name, why=""):
    global failures
    if ok:
        print(f"ok {name}")
    else:
        failures += 1
        print(f"FAIL {name}: {why}")


class Bad(Exception):
    """A launch file breaks a rule; the message says which."""


def need(cond, why):
    if not cond:
        raise Bad(why)


# ---------------------------------------------------------------------------
# Shell text: variables, the trainer's command line, the launcher's settings.

def shell_vars(text):
    """NAME=value assignments of a script: ${NAME:-default} gives the default."""
    out = {}
    for m in re.finditer(r"^\s*(?:export\s+)?([A-Z_][A-Z0-9_]*)=(\S+)", text, re.M):
        v = m.group(2)
        d = re.fullmatch(r'"?\$\{[A-Z_][A-Z0-9_]*:-([^}]*)\}"?', v)
        out[m.group(1)] = d.group(1) if d else v
    return out


def resolve(tok, env):
    """A token with $NAME / ${NAME} replaced by the script's values (unknown names stay)."""
    return re.sub(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", lambda m: env.get(m.group(1), m.group(0)), tok)


def logical_lines(text):
    """Lines with backslash continuations joined, comment lines dropped."""
    text = re.sub(r"\\\n", " ", text)
    return [l for l in text.split("\n") if l.strip() and not l.lstrip().startswith("#")]


def trainer_command(text):
    """(launcher tokens, trainer name, flag tokens) of the one line that runs a trainer."""
    found = []
    for line in logical_lines(text):
        toks = shlex.split(line, comments=True)
        for i, t in enumerate(toks):
            if os.path.basename(t) in TRAINERS:
                rest = toks[i + 1:]
                ends = [k for k, r in enumerate(rest) if r in ("||", "&&", ";", "|", "&") or r.startswith(">")]
                found.append((toks[:i], os.path.basename(t), rest[:ends[0]] if ends else rest))  # up to a shell operator
                break
    need(len(found) == 1, f"{len(found)} lines run a trainer, expected exactly 1")
    return found[0]


def flag_pairs(flags):
    need(len(flags) % 2 == 0, "the trainer's flags do not come in pairs (flag value)")
    pairs = [(flags[i], flags[i + 1]) for i in range(0, len(flags), 2)]
    for f, _ in pairs:
        need(re.fullmatch(r"-[A-Za-z]", f) is not None, f"'{f}' is not a trainer flag")
    letters = [f for f, _ in pairs]
    need(len(set(letters)) == len(letters), "a flag is given twice")
    return dict(pairs)


def option(launcher, *names):
    """The value after the first of names in the launcher's tokens, or None."""
    for i, t in enumerate(launcher):
        if t in names and i + 1 < len(launcher):
            return launcher[i + 1]
    return None


def int_value(s, what):
    need(re.fullmatch(r"[0-9]+", str(s)) is not None, f"{what} is '{s}', not a number")
    return int(s)


def check_launcher_options(launcher, prog, help_text):
    """Every --option of the launcher line is one the installed launcher documents."""
    for t in launcher:
        if t.startswith("-") and not re.fullmatch(r"-?[0-9].*", t):
            name = t.split("=")[0]
            need(re.search(r"(^|[\s,|\[])" + re.escape(name) + r"([\s,|=\]]|$)", help_text, re.M) is not None,
                 f"{prog} does not know the option {name} (per its --help)")


# ---------------------------------------------------------------------------
# Manifests: the fields each operator needs.

def containers(pod_template, what):
    spec = pod_template.get("spec") or {}
    cs = spec.get("containers") or []
    need(len(cs) == 1, f"{what}: expected one container, found {len(cs)}")
    need(cs[0].get("image"), f"{what}: the container has no image")
    return spec, cs[0]


def gpu_limit(c):
    return int(((c.get("resources") or {}).get("limits") or {}).get("nvidia.com/gpu", 0))


def check_volume(spec, c, what):
    """The container mounts the shared PersistentVolumeClaim at /data."""
    vols = {v["name"]: v for v in spec.get("volumes") or []}
    mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts") or []}
    need("/data" in mounts, f"{what}: nothing mounted at /data")
    v = vols.get(mounts["/data"])
    need(v and (v.get("persistentVolumeClaim") or {}).get("claimName"), f"{what}: /data is not a PersistentVolumeClaim volume")


def script_of(c, what):
    """The shell script a container runs as /bin/sh -c SCRIPT."""
    cmd = list(c.get("command") or []) + list(c.get("args") or [])
    need(cmd[:2] == ["/bin/sh", "-c"] and len(cmd) == 3, f"{what}: the command is not /bin/sh -c SCRIPT")
    return cmd[2]


def pytorchjob(doc):
    need(doc.get("apiVersion") == "kubeflow.org/v1" and doc.get("kind") == "PyTorchJob", "not apiVersion kubeflow.org/v1, kind PyTorchJob")
    need((doc.get("metadata") or {}).get("name"), "no metadata.name")
    spec = doc.get("spec") or {}
    # one process per pod, said explicitly (the operator's default "auto" means the same to the trainer)
    need(spec.get("nprocPerNode") == "1", 'nprocPerNode must be "1" (one process per pod)')
    reps = spec.get("pytorchReplicaSpecs") or {}
    need(set(reps) == {"Master", "Worker"}, f"pytorchReplicaSpecs has {sorted(reps)}, expected Master and Worker")
    need(reps["Master"].get("replicas") == 1, "Master must have replicas: 1")
    scripts, world = [], 0
    for name, r in reps.items():
        n = r.get("replicas")
        need(isinstance(n, int) and n >= 1, f"{name}: replicas must be a positive integer")
        need(r.get("restartPolicy") == "OnFailure", f"{name}: restartPolicy must be OnFailure")
        pspec, c = containers(r.get("template") or {}, name)
        need(c.get("name") == "pytorch", f"{name}: the container must be named pytorch (the operator looks for it)")
        need(gpu_limit(c) == 1, f"{name}: one process per pod needs nvidia.com/gpu: 1")
        check_volume(pspec, c, name)
        scripts.append(script_of(c, name))
        world += n
    need(len(set(scripts)) == 1, "Master and Worker run different scripts")
    # what the operator sets in the Master's container (envvar.go), for a job of one pod
    pod_env = {"RANK": "0", "WORLD_SIZE": "1", "PET_NODE_RANK": "0", "PET_NNODES": "1", "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": "23456", "PET_NPROC_PER_NODE": spec.get("nprocPerNode", "auto")}
    return scripts[0], world, pod_env


def trainjob(doc):
    need(doc.get("apiVersion") == "trainer.kubeflow.org/v1alpha1" and doc.get("kind") == "TrainJob",
         "not apiVersion trainer.kubeflow.org/v1alpha1, kind TrainJob")
    need((doc.get("metadata") or {}).get("name"), "no metadata.name")
    spec = doc.get("spec") or {}
    ref = spec.get("runtimeRef") or {}
    need(ref.get("name") == "torch-distributed", "runtimeRef.name must be torch-distributed")
    need(ref.get("kind", "ClusterTrainingRuntime") == "ClusterTrainingRuntime", "runtimeRef.kind must be ClusterTrainingRuntime")
    need(ref.get("apiGroup", "trainer.kubeflow.org") == "trainer.kubeflow.org", "runtimeRef.apiGroup must be trainer.kubeflow.org")
    tr = spec.get("trainer") or {}
    need(tr.get("image"), "trainer.image missing")
    nodes, procs = tr.get("numNodes"), tr.get("numProcPerNode")
    need(isinstance(nodes, int) and nodes >= 1, "trainer.numNodes must be a positive integer")
    need(procs == 1, "trainer.numProcPerNode must be 1: the command starts one trainer per node")
    need(gpu_limit({"resources": tr.get("resourcesPerNode") or {}}) == 1, "resourcesPerNode must ask for nvidia.com/gpu: 1")
    for e in tr.get("env") or []:
        need(not e["name"].startswith("PET_"), f"trainer.env sets {e['name']}, reserved by the torch runtime")
    script = script_of({"command": tr.get("command"), "args": tr.get("args")}, "trainer")
    for var, pet in (("RANK", "PET_NODE_RANK"), ("WORLD_SIZE", "PET_NNODES"), ("MASTER_ADDR", "PET_MASTER_ADDR"),
                     ("MASTER_PORT", "PET_MASTER_PORT")):
        need(re.search(rf'\b{var}="?\${pet}\b', script), f"the command does not set {var} from {pet}")
    patches = spec.get("runtimePatches") or []
    need(len(patches) >= 1 and all(p.get("manager") for p in patches), "runtimePatches need a manager each")
    jobs = [j for p in patches for j in (((p.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec") or {}).get("replicatedJobs") or []]
    node = [j for j in jobs if j.get("name") == "node"]
    need(len(node) == 1, "runtimePatches must patch the replicated job named node")
    pspec = ((((node[0].get("template") or {}).get("spec") or {}).get("template")) or {}).get("spec") or {}
    cs = [c for c in pspec.get("containers") or [] if c.get("name") == "node"]
    need(len(cs) == 1, "runtimePatches must patch the container named node")
    check_volume(pspec, cs[0], "node")
    # what the torch plugin sets in node 0's container (torch.go), for a job of one node
    pod_env = {"PET_NNODES": "1", "PET_NODE_RANK": "0", "PET_NPROC_PER_NODE": str(procs), "PET_MASTER_ADDR": "127.0.0.1",
               "PET_MASTER_PORT": "29500"}
    return script, nodes * procs, pod_env


def mpijob(doc):
    need(doc.get("apiVersion") == "kubeflow.org/v2beta1" and doc.get("kind") == "MPIJob", "not apiVersion kubeflow.org/v2beta1, kind MPIJob")
    need((doc.get("metadata") or {}).get("name"), "no metadata.name")
    spec = doc.get("spec") or {}
    slots = spec.get("slotsPerWorker")
    need(isinstance(slots, int) and slots >= 1, "slotsPerWorker must be a positive integer")
    need(spec.get("mpiImplementation", "OpenMPI") == "OpenMPI", "the image has Open MPI: mpiImplementation must be OpenMPI")
    reps = spec.get("mpiReplicaSpecs") or {}
    need(set(reps) == {"Launcher", "Worker"}, f"mpiReplicaSpecs has {sorted(reps)}, expected Launcher and Worker")
    need(reps["Launcher"].get("replicas") == 1, "Launcher must have replicas: 1")
    workers = reps["Worker"].get("replicas")
    need(isinstance(workers, int) and workers >= 1, "Worker: replicas must be a positive integer")
    for name, r in reps.items():
        need(r.get("restartPolicy") == "OnFailure", f"{name}: restartPolicy must be OnFailure")
    lspec, lc = containers(reps["Launcher"].get("template") or {}, "Launcher")
    wspec, wc = containers(reps["Worker"].get("template") or {}, "Worker")
    need(gpu_limit(wc) == slots, "Worker: nvidia.com/gpu must equal slotsPerWorker (one rank per GPU)")
    need(gpu_limit(lc) == 0, "Launcher: runs mpirun only, it needs no GPU")
    need(list(wc.get("command") or [])[:1] == ["/usr/sbin/sshd"] and "-D" in "".join(wc.get("command")[1:] + (wc.get("args") or [])),
         "Worker: must run /usr/sbin/sshd in the foreground (-D): mpirun reaches the workers over ssh")
    check_volume(lspec, lc, "Launcher")
    check_volume(wspec, wc, "Worker")
    return script_of(lc, "Launcher"), workers * slots, None  # the ranks' environment comes from mpirun


MANIFESTS = {"PyTorchJob": pytorchjob, "TrainJob": trainjob, "MPIJob": mpijob}


# ---------------------------------------------------------------------------
# The launcher line of each script: how many ranks it starts, and its settings.

def world_of_script(text, launcher, env, helps):
    """W the launcher starts, checking the launcher's own settings."""
    launcher = [resolve(t, env) for t in launcher]
    if launcher and launcher[0] == "exec":
        launcher = launcher[1:]
    prog = launcher[0] if launcher else ""
    if prog in helps:
        check_launcher_options(launcher[1:], prog, helps[prog])
    if prog == "mpirun":
        w = int_value(option(launcher, "-np", "-n"), "mpirun -np")
        kill = [launcher[i + 2] for i in range(len(launcher) - 2) if launcher[i:i + 2] == ["--mca", "odls_base_sigkill_timeout"]]
        need(kill and int_value(kill[0], "odls_base_sigkill_timeout") >= 30,
             "mpirun needs --mca odls_base_sigkill_timeout 30 or more: its default, 1 s after passing on SIGTERM, leaves no time for a checkpoint")
        return w, "mpirun"
    if prog == "torchrun":
        need("--no_python" in launcher, "torchrun needs --no_python: the trainer is not a Python script")
        nodes = int_value(option(launcher, "--nnodes") or "1", "torchrun --nnodes")
        procs = int_value(option(launcher, "--nproc_per_node"), "torchrun --nproc_per_node")
        need(option(launcher, "--master_port") is not None, "torchrun needs an explicit --master_port (the trainer uses the next port)")
        return nodes * procs, "torchrun"
    if prog == "srun":
        sb = dict(re.findall(r"^#SBATCH\s+--([a-z-]+)(?:=(\S+))?", text, re.M))
        need(re.fullmatch(r"TERM@[0-9]+", sb.get("signal", "")) is not None, "#SBATCH --signal=TERM@SECONDS missing: no warning before the time limit")
        need("requeue" in sb, "#SBATCH --requeue missing: a preempted job would not come back")
        need(re.search(r'^if \[ "\$status" -eq 143 \]; then scontrol requeue "\$SLURM_JOB_ID"; fi$', text, re.M),
             "the script must requeue the job when srun ends with 143 (stopped by SIGTERM before the time limit)")
        nodes, tasks = int_value(sb.get("nodes"), "--nodes"), int_value(sb.get("ntasks-per-node"), "--ntasks-per-node")
        need(sb.get("gpus-per-node") == str(tasks) or sb.get("gpus-per-task") == "1", "one task per GPU: --gpus-per-node must equal --ntasks-per-node (or --gpus-per-task=1)")
        return nodes * tasks, "srun"
    raise Bad(f"the trainer is started by '{prog}', not by mpirun, torchrun or srun")


def check_rendezvous(kind, text, launcher, flags):
    """How the ranks get the NCCL id: under mpirun over MPI (train_sftcu_mpi), so the line
    sets up no rendezvous it would not use; under srun at MASTER_ADDR, or in -f DIR."""
    if kind == "mpirun":
        need("-f" not in flags and not any(t.startswith("MASTER_ADDR") for t in launcher),
             "under mpirun train_sftcu_mpi sends the NCCL id over MPI: no -x MASTER_ADDR, no -f DIR")
    elif kind == "srun" and "-f" not in flags:
        need(re.search(r"^\s*export\s+[^\n]*\bMASTER_ADDR\b", text, re.M), "MASTER_ADDR is not exported for the ranks, and there is no -f DIR")


# ---------------------------------------------------------------------------
# The trainer's command line, run by the CPU trainer.

def pod_environment(text, pod_env):
    """The launcher variables the trainer sees in a pod: the operator's (pod_env), after
    the script's lines before the trainer's have run (they may export more)."""
    lines = text[:text.index("train_sftcu")].rsplit("\n", 1)[0]  # (also finds train_sftcu_mpi)
    p = subprocess.run(["sh", "-c", lines + "\nenv"], env=dict(pod_env, PATH=os.environ["PATH"]), stdout=subprocess.PIPE, text=True)
    need(p.returncode == 0, "the container's script fails before it reaches the trainer")
    env = dict(l.split("=", 1) for l in p.stdout.splitlines() if "=" in l)
    return {k: v for k, v in env.items() if LAUNCHER_ENV.search(k)}


def run_trainer(flags, tmp, pod_env):
    """Fresh start (-y 0) then resume (-y 1), one step each, with the file's flags, in
    the pod's launcher environment when there is one (else none: one process)."""
    env = {k: v for k, v in os.environ.items() if not LAUNCHER_ENV.search(k)}
    env.update(pod_env or {})
    env["OMP_NUM_THREADS"] = "1"
    out = os.path.join(tmp, "out")
    shutil.rmtree(out, ignore_errors=True)
    B, T = int_value(flags.get("-b", "4"), "-b"), int_value(flags.get("-t"), "-t")
    sub = {"-i": "data/demo/train.bin", "-j": "data/demo/val.bin", "-k": "data/demo/tokenizer", "-E": "data/demo/eval.jsonl",
           "-e": f"d1c16h1t{T}", "-o": out, "-f": os.path.join(tmp, "rdzv"), "-d": str(B * T)}
    args = []
    for f, v in flags.items():
        if f != "-y":
            args += [f, sub.get(f, v)]
    for resume, steps in (("0", "1"), ("1", "2")):
        cmd = ["./train_sft"] + args + ["-y", resume, "-x", steps]
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
        last = (p.stdout.strip().splitlines() or [""])[-1]
        need(p.returncode == 0, f"{' '.join(cmd)}: exit {p.returncode}: {last}")
    with open(os.path.join(out, "latest")) as f:
        need(f.read().strip() == "step_00000002", "the resumed run did not end at step 2")


def check_command(text, env, world, kind, launcher, trainer, flags, tmp, pod_env):
    raw = flag_pairs(flags)
    vals = {f: resolve(v, env) for f, v in raw.items()}
    gpu = "train_sftcu_mpi" if kind == "mpirun" else "train_sftcu"  # mpirun: the build that takes the NCCL id over MPI
    need(trainer == gpu, f"runs {trainer}; under {kind} the launch files run the GPU trainer {gpu}")
    for f, v in vals.items():
        if f not in PATH_FLAGS and f != "-y":
            need("$" not in v, f"{f} {raw[f]}: only paths may come from variables, so the values checked here are the ones used")
    need(raw.get("-o") == "$OUT" and raw.get("-y") == "$RESUME" and RESUME_GUARD.search(text),
         "-y must be $RESUME and -o $OUT, with the line RESUME=0; [ -f \"$OUT/latest\" ] && RESUME=1 before: -y 1 on every restart, -y 0 on the first start")
    B, T, d = (int_value(vals.get(f), f) for f in ("-b", "-t", "-d"))
    need(d % (B * T * world) == 0, f"-d {d} is not a multiple of B*T*W = {B}*{T}*{world}")
    check_rendezvous(kind, text, [resolve(t, env) for t in launcher], vals)
    run_trainer(vals, tmp, pod_environment(text, pod_env) if pod_env else None)
    return B, T, d


def check_file(text, world, launcher_of_script, helps, tmp, pod_env=None):
    """The trainer command line of one launch file (a script, or a manifest's script)."""
    env = shell_vars(text)
    launcher, trainer, flags = trainer_command(text)
    kind = "pod"
    if launcher_of_script:
        world, kind = world_of_script(text, launcher, env, helps)
    elif [t for t in launcher if t != "exec"][:1] == ["mpirun"]:
        w, kind = world_of_script(text, launcher, env, helps)
        need(w == world, f"mpirun -np {w} but the job has {world} slots (Worker replicas x slotsPerWorker)")
    B, T, d = check_command(text, env, world, kind, launcher, trainer, flags, tmp, pod_env)
    where = " in the environment the operator gives rank 0" if pod_env else ""
    return f"W={world}, -d {d} = {B}*{T}*{world}*{d // (B * T * world)}; ./train_sft accepts the flags{where} (fresh start and resume)"


def main():
    helps = {}
    # mpirun refuses to run as root, even for --help, without --allow-run-as-root
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    for prog, args in (("mpirun", root + ["--help", "all"]), ("torchrun", ["--help"])):
        if shutil.which(prog):
            helps[prog] = subprocess.run([prog] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
        else:
            print(f"skip launch_{prog}_options: {prog} is not installed, its options in the launch files are not checked")
    files = sorted(os.listdir(HERE))
    tmp = tempfile.mkdtemp()
    try:
        for f in files:
            path = os.path.join(HERE, f)
            with open(path) as fh:
                text = fh.read()
            try:
                if f.endswith(".yaml"):
                    docs = [d for d in yaml.safe_load_all(text) if d is not None]
                    need(len(docs) == 1, f"{len(docs)} documents, expected 1")
                    check = MANIFESTS.get(docs[0].get("kind"))
                    need(check is not None, f"unknown kind {docs[0].get('kind')}")
                    script, world, pod_env = check(docs[0])
                    report(True, f"launch_manifest {f}: {docs[0]['kind']} {docs[0]['apiVersion']}, fields the operator needs")
                    sh = subprocess.run(["sh", "-n"], input=script, text=True, stderr=subprocess.PIPE)
                    need(sh.returncode == 0, f"the container's script is not valid sh: {sh.stderr.strip()}")
                    report(True, f"launch_command {f}: " + check_file(script, world, False, helps, tmp, pod_env))
                elif f.endswith(".sh") or f.endswith(".sbatch"):
                    report(True, f"launch_command {f}: " + check_file(text, 0, True, helps, tmp))
            except (Bad, KeyError, TypeError, ValueError, OSError, subprocess.TimeoutExpired) as e:
                report(False, f"launch {f}", str(e) or type(e).__name__)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
