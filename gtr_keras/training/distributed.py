"""Training across processes: the cluster a `TF_CONFIG` describes, the multi-worker strategy, the input
pipelines of any strategy, and the collectives that keep the workers of a run in step.

Every worker runs the same command with its own `TF_CONFIG` (the TensorFlow convention that Vertex AI,
Kubernetes TFJob and GKE follow). The chief (the `chief` task, else worker 0) owns the output
directory; the other workers write theirs to a temporary directory (`worker_directory`) and
receive the chief's tokenizer, restored weights and step (`broadcast_bytes`, `broadcast_variables`)
after checking that they run the same settings on the same inputs (`check_same_run`).

Nothing waits without bound: joining is a barrier of `--worker-timeout` (`multi_worker_strategy`), a worker
that dies or hangs fails the others (`watching`, heartbeats), and SIGTERM or SIGINT to any worker ends it at
once and so the others (`stopping_on_signals`).

Input (`distributed_batches`): every input pipeline (one per worker, one per TPU host) reads the
same stream of global batches and keeps only the rows of its own replicas, so that the union of
the replicas' batches at a step is the global batch one process would train on at that step, in
the same order.
"""

import contextlib
import dataclasses
import errno
import json
import logging
import os
import re
import shutil
import socket
import sys
import tempfile
import threading
import time

from gtr_keras.errors import MismatchError, TrainingError, UserError

logger = logging.getLogger(__name__)

TF_CONFIG = "TF_CONFIG"
_JOBS = ("chief", "worker")
_EXAMPLE = 'TF_CONFIG=\'{"cluster": {"worker": ["host0:2222", "host1:2222"]}, "task": {"type": "worker", "index": 0}}\''
_PREEMPTION_KEY = "TF_DEFAULT_PREEMPTION_NOTICE_KEY"  # where TensorFlow's SIGTERM handler records its task
_LOST_ERRORS = ("UnavailableError", "AbortedError", "DeadlineExceededError", "CancelledError", "InternalError")


def _config_error(what):
    return UserError(f"{TF_CONFIG}: {what}; --strategy multi-worker needs it on every worker, e.g. {_EXAMPLE}")


def _address(job, index, address):
    host, _, port = address.rpartition(":") if isinstance(address, str) else ("", "", "")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise _config_error(f'cluster.{job}[{index}] must be "host:port", got {address!r}')
    return address


def _endpoints(address):
    """The `(IP address, port)` pairs that `address` ("host:port") resolves to; `{(host, port)}` (lower case)
    for a host name that does not resolve here (another machine's, say)."""
    host, _, port = address.rpartition(":")
    try:
        resolved = socket.getaddrinfo(host.strip("[]"), int(port), type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return {(host.lower(), int(port))}
    return {(info[4][0], int(port)) for info in resolved}


def _check_distinct(named):
    """Raises the `TF_CONFIG` error for two of `named` (`[(field, address)]`) that are one address, by name or
    by what their host names resolve to (`127.0.0.1:P` and `localhost:P`)."""
    seen = {}
    for field, address in named:
        endpoints = _endpoints(address)
        clash = next(((endpoint, seen[endpoint]) for endpoint in endpoints if endpoint in seen), None)
        if clash:
            (host, port), (first, other) = clash
            same = address if other == address else f"{other} and {address} (both {host}:{port})"
            raise _config_error(f"the address {same} is given to two tasks, {first} and {field}")
        seen.update(dict.fromkeys(endpoints, (field, address)))


@dataclasses.dataclass(frozen=True)
class Cluster:
    """The tasks of a multi-worker run and this process's place among them, as `TF_CONFIG` gives them.

    Args:
        jobs: `{"chief": [address], "worker": [address, ...]}` ("host:port";
            the `chief` job is optional).
        task_type: this process's job, `"chief"` or `"worker"`.
        task_index: this process's index in its job.

    Example:
    >>> cluster = Cluster.from_environment({"TF_CONFIG": json.dumps({
    ...     "cluster": {"worker": ["127.0.0.1:2222", "127.0.0.1:2223"]}, "task": {"type": "worker", "index": 1}})})
    >>> cluster.is_chief, cluster.describe(0)
    (False, 'worker 0 (127.0.0.1:2222)')
    """

    jobs: dict
    task_type: str
    task_index: int

    @classmethod
    def from_environment(cls, environ=None):
        """The cluster of `environ[TF_CONFIG]` (default: `os.environ`).

        Raises:
            UserError: `TF_CONFIG` missing or malformed, naming what is wrong.
        """
        text = (os.environ if environ is None else environ).get(TF_CONFIG, "")
        if not text.strip():
            raise _config_error("not set")
        try:
            config = json.loads(text)
        except json.JSONDecodeError as error:
            raise _config_error(f"not valid JSON ({error})") from None
        if not isinstance(config, dict) or not isinstance(config.get("cluster"), dict):
            raise _config_error('needs a "cluster" object of task addresses')
        cluster, task = config["cluster"], config.get("task")
        unknown = sorted(set(cluster) - set(_JOBS))
        if unknown:
            raise _config_error(
                f"job {unknown[0]!r} is not supported (multi-worker training has "
                f"{' and '.join(_JOBS)} tasks only, no parameter servers or evaluators)"
            )
        if not cluster.get("worker") and not cluster.get("chief"):
            raise _config_error('cluster has no "worker" list')
        jobs = {}
        for job in _JOBS:
            addresses = cluster.get(job, [])
            if not isinstance(addresses, list) or (job in cluster and not addresses):
                raise _config_error(f'cluster.{job} must be a non-empty list of "host:port" addresses')
            if job in cluster:
                jobs[job] = [_address(job, index, address) for index, address in enumerate(addresses)]
        if len(jobs.get("chief", [])) > 1:
            raise _config_error("cluster.chief must list one address")
        _check_distinct(
            [(f"cluster.{job}[{index}]", address) for job in jobs for index, address in enumerate(jobs[job])]
        )
        if not isinstance(task, dict):
            raise _config_error('needs a "task" object {"type", "index"} naming this process')
        missing = [field for field in ("type", "index") if field not in task]
        if missing:
            raise _config_error(
                f'task has no "{missing[0]}" ("task": {{"type": "worker", "index": 0}} names '
                "this process's job and its position in it)"
            )
        task_type, task_index = task["type"], task["index"]
        if task_type not in jobs:
            raise _config_error(f"task.type must be one of {sorted(jobs)}, got {task_type!r}")
        if (
            isinstance(task_index, bool)
            or not isinstance(task_index, int)
            or not 0 <= task_index < len(jobs[task_type])
        ):
            raise _config_error(
                f"task.index must be 0 to {len(jobs[task_type]) - 1} for the "
                f"{len(jobs[task_type])} {task_type} task(s), got {task_index!r}"
            )
        return cls(jobs, task_type, task_index)

    @property
    def tasks(self):
        """`[(job, index, address)]` in replica order: the chief, then the workers."""
        return [(job, index, address) for job in _JOBS for index, address in enumerate(self.jobs.get(job, []))]

    @property
    def task_number(self):
        """This task's position in `tasks`."""
        return self.tasks.index((self.task_type, self.task_index, self.jobs[self.task_type][self.task_index]))

    @property
    def is_chief(self):
        """True for the task that writes the output: the chief, or worker 0 without one."""
        return self.task_number == 0

    def describe(self, number):
        """`"worker 1 (host:port)"` for the task at `tasks[number]`."""
        job, index, address = self.tasks[number]
        return f"{job} {index} ({address})"

    @property
    def others(self):
        """The positions in `tasks` of the other tasks."""
        return [number for number in range(len(self.tasks)) if number != self.task_number]

    def check_port_free(self):
        """Raises a `UserError` naming this task when another program listens on (or holds) its port here:
        TensorFlow's server, which listens on the port on every interface, could not start.

        Example:
        >>> with socket.create_server(("127.0.0.1", 0)) as held:
        ...     Cluster({"worker": [f"127.0.0.1:{held.getsockname()[1]}"]}, "worker", 0).check_port_free()
        Traceback (most recent call last):
        ...
        gtr_keras.errors.UserError: TF_CONFIG: worker 0 (127.0.0.1:...): port ... is in use by another program...
        """
        port = int(self.jobs[self.task_type][self.task_index].rpartition(":")[2])
        for family, host in ((socket.AF_INET, ""), (socket.AF_INET6, "::")):
            try:
                with socket.socket(family) as probe:
                    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a closed port's TIME_WAIT is free
                    probe.bind((host, port))
            except OSError as error:
                if error.errno == errno.EADDRINUSE:
                    raise UserError(
                        f"{TF_CONFIG}: {self.describe(self.task_number)}: port {port} is in use by another program "
                        "on this machine (address in use); stop it, or give this task a free port in every "
                        f"worker's {TF_CONFIG}"
                    ) from None

    def lost_task(self, message):
        """The task a collective error `message` is about, else one whose port no longer answers, else None."""
        for number in self.others:
            job, index, address = self.tasks[number]
            if re.search(rf"/job:{job}/replica:0/task:{index}\b", message) or address in message:
                return number
        return next((number for number in self.others if not self.answers(number)), None)

    def answers(self, number):
        """False when the port of `tasks[number]` refuses connections (the process that listened there is
        gone); True when it accepts one, or does not say in 2 s (a slow network: the heartbeats decide)."""
        host, _, port = self.tasks[number][2].rpartition(":")
        try:
            socket.create_connection((host, int(port)), timeout=2).close()
        except ConnectionRefusedError:
            return False
        except OSError:
            return True
        return True


def multi_worker_strategy(cluster, timeout):
    """A `tf.distribute.MultiWorkerMirroredStrategy` over `cluster` (whose `TF_CONFIG` is set): it waits
    up to `timeout` seconds for every task to start, and a task silent for `timeout` seconds (its
    coordination-service heartbeats stop) fails the run on the others (one that dies fails them at once
    inside `watching`). A task that does not join is a `TrainingError` naming it, and a port another program
    holds a `UserError` before anything starts (`Cluster.check_port_free`)."""
    import tensorflow as tf
    from tensorflow.compiler.xla.tsl.protobuf import coordination_config_pb2
    from tensorflow.python.eager import context

    cluster.check_port_free()
    leader = "chief" if "chief" in cluster.jobs else "worker"
    context.context().configure_coordination_service(
        service_type="standalone",
        service_leader=f"/job:{leader}/replica:0/task:0",
        cluster_register_timeout_in_ms=int(timeout * 1000),
        heartbeat_timeout_in_ms=int(timeout * 1000),
        shutdown_barrier_timeout_in_ms=int(timeout * 1000),
        coordinated_jobs=[
            coordination_config_pb2.CoordinatedJob(name=job, num_tasks=len(addresses))
            for job, addresses in cluster.jobs.items()
        ],
    )
    # Registration is a barrier of `timeout`: without one the leader waits for an absent task without end, in C++
    # and holding Python's lock, so that no Python thread or signal handler can stop it.
    context.context().coordination_service.cluster_register_with_barrier = True
    try:
        return tf.distribute.MultiWorkerMirroredStrategy()
    except tf.errors.OpError as error:
        number = cluster.lost_task(str(error))
        who = cluster.describe(number) if number is not None else "a task"
        raise TrainingError(
            f"{TF_CONFIG}: {who} did not join the cluster within {timeout:g} s ({type(error).__name__}); start "
            "every worker it lists with the same command, or raise --worker-timeout"
        ) from None


@contextlib.contextmanager
def watching(cluster, interval=1.0):
    """While the block runs, a thread knocks on the other tasks' ports every `interval` seconds; when one
    refuses twice in a row (its process died), it aborts this process's collectives naming that task, so a step
    waiting for it fails at once rather than after the heartbeat timeout (a task that hangs keeps its
    port open: the coordination service's heartbeats catch it)."""
    import tensorflow as tf
    from tensorflow.python.eager import context

    stop = threading.Event()

    def watch():
        refused = set()  # tasks whose port refused the last knock: a second refusal in a row is a death
        while not stop.wait(interval):
            now = {number for number in cluster.others if not cluster.answers(number)}
            lost = sorted(now & refused)
            if lost:
                context.context().abort_collective_ops(
                    tf.errors.UNAVAILABLE, f"{cluster.describe(lost[0])} is gone: its port is closed"
                )
                return
            refused = now

    thread = threading.Thread(target=watch, name="gtr-keras-watch-workers", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _stopped_while_joining(cluster):
    """The position in `tasks` of a task that got SIGTERM while the workers joined, else None. TensorFlow's
    handler took that signal for a preemption notice and recorded the task for every worker to read (it
    polls for the signal once a second: the wait covers that)."""
    import tensorflow as tf
    from tensorflow.python.eager import context

    try:
        task = context.context().get_config_key_value(_PREEMPTION_KEY, timeout_in_ms=1500)
    except tf.errors.OpError:
        return None
    match = re.fullmatch(r"/job:(\w+)(?:/replica:0)?/task:(\d+)", task)
    known = [(job, str(index)) for job, index, _ in cluster.tasks]
    return known.index(match.groups()) if match and match.groups() in known else None


@contextlib.contextmanager
def stopping_on_signals(cluster, command, kept):
    """While the block runs, SIGTERM or SIGINT ends this process at once (at the next Python instruction: a step
    in progress ends first), with exit status 128 + the signal's number and one line on stderr, `gtr-keras
    COMMAND: stopped by SIGTERM; KEPT: rerun every worker with the same command to resume from it` (`kept()`
    says where the last complete checkpoint is). The other workers then find its port closed (`watching`) and
    end too. Without this, a worker that unwound normally would wait for the others at TensorFlow's shutdown
    barrier while they wait for it in a collective.

    The block calls the value it gets, `joined()`, once the strategy exists: TensorFlow's coordination service
    takes SIGTERM from its start, as a preemption notice, and trains on. `joined()` takes SIGTERM back, and a
    SIGTERM that a task got while the workers joined ends that task as above and every other one with exit 2
    naming it (a SIGINT then ends this task once they have joined).
    """
    import signal

    def end(line, status):
        sys.stdout.flush()
        logger.error(
            "gtr-keras %s: %s; %s: rerun every worker with the same command to resume from it", command, line, kept()
        )
        os._exit(status)

    def stop(number, frame):
        end(f"stopped by {signal.Signals(number).name}", 128 + number)

    def joined():
        signal.signal(signal.SIGTERM, stop)
        stopped = _stopped_while_joining(cluster)
        if stopped == cluster.task_number:
            time.sleep(2)  # the notice lives in the leader's coordination service: the others read it first
            stop(signal.SIGTERM, None)
        if stopped is not None:
            end(f"error: {cluster.describe(stopped)} was stopped by SIGTERM as the workers joined", 2)

    previous = {number: signal.signal(number, stop) for number in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield joined
    finally:
        for number, handler in previous.items():
            signal.signal(number, signal.SIG_DFL if handler is None else handler)


def is_multi_worker(strategy):
    """True for a strategy whose replicas span processes (Keras' own test, `_collective_all_reduce_multi_worker`)."""
    import tensorflow as tf

    return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) and strategy.extended._in_multi_worker_mode()


def distributed_batches(strategy, make_batches, batch_size):
    """The training input of `strategy`, one pipeline per worker or TPU host.

    Args:
        strategy: any `tf.distribute.Strategy`.
        make_batches: `make_batches(rows)` -> a `tf.data.Dataset` of the rows
            `[start, stop)` of every global batch of the stream (the same
            stream on every pipeline).
        batch_size: the global batch size.

    Returns:
        What `strategy.distribute_datasets_from_function` returns: each
        replica's batch is its `batch_size / replicas` consecutive rows of the
        global batch, in replica order (the default strategy's is the dataset
        of whole global batches).
    """

    def dataset_fn(context):
        local_replicas = context.num_replicas_in_sync // context.num_input_pipelines
        size = context.get_per_replica_batch_size(batch_size)
        start = context.input_pipeline_id * local_replicas * size
        batches = make_batches((start, start + local_replicas * size))
        return batches.rebatch(size, drop_remainder=True) if local_replicas > 1 else batches

    return strategy.distribute_datasets_from_function(dataset_fn)


def _gather_int32(strategy, values):
    """Every replica's int32 `values` `[n]` (the same `n` everywhere), `[replicas, n]` in replica order."""
    import tensorflow as tf

    def gather():
        return tf.distribute.get_replica_context().all_gather(tf.constant(values, tf.int32)[None], axis=0)

    return strategy.experimental_local_results(strategy.run(gather))[0].numpy()


def gather_bytes(strategy, cluster, data):
    """Each worker's `data` (bytes), a list in task order (`Cluster.tasks`)."""
    import numpy as np

    per_worker = strategy.num_replicas_in_sync // len(cluster.tasks)
    lengths = _gather_int32(strategy, [len(data)])[::per_worker, 0]
    padded = np.zeros(max(lengths), np.int32)
    padded[: len(data)] = np.frombuffer(data, np.uint8)
    rows = _gather_int32(strategy, padded)[::per_worker]
    return [row[:length].astype(np.uint8).tobytes() for row, length in zip(rows, lengths)]


def broadcast_bytes(strategy, cluster, data):
    """The chief's `data` (bytes), on every worker."""
    return gather_bytes(strategy, cluster, data)[0]


def broadcast_variables(strategy, variables):
    """Sets every worker's Keras `variables` (created under `strategy`'s scope) to the chief's values: an
    all-reduce of the chief's values and zeros elsewhere, exact."""
    import tensorflow as tf

    variables = [variable.value for variable in variables]

    @tf.function
    def chief_values():
        context = tf.distribute.get_replica_context()
        first = tf.equal(context.replica_id_in_sync_group, 0)
        return [context.all_reduce(tf.distribute.ReduceOp.SUM, tf.where(first, v, tf.zeros_like(v))) for v in variables]

    values = strategy.run(chief_values)
    for variable, value in zip(variables, values):
        variable.assign(strategy.experimental_local_results(value)[0])


def check_same_run(strategy, cluster, identity, failure=None):
    """Compares the workers of a multi-worker run, on every worker alike (a barrier too).

    Args:
        strategy: the multi-worker strategy.
        cluster: its `Cluster`.
        identity: a JSON-able dict of what decides the weights (settings, input
            fingerprints), which every worker must share.
        failure: the `UserError` this worker met in its checks, or None.

    Raises:
        `failure` on its worker; on the others a `TrainingError` naming the
        worker that failed and its message; else `MismatchError` naming the
        first worker whose `identity` differs from the chief's, and the key.
    """
    mine = json.dumps({"identity": identity, "failure": str(failure) if failure else None}, sort_keys=True)
    records = [json.loads(data) for data in gather_bytes(strategy, cluster, mine.encode("utf-8"))]
    if failure is not None:
        raise failure
    for number, other in enumerate(records):
        if other["failure"]:
            raise TrainingError(f"{cluster.describe(number)} stopped: {other['failure']}")
    chief = records[0]["identity"]
    for number, other in enumerate(record["identity"] for record in records[1:]):
        different = [
            key
            for key in sorted({*chief, *other})
            if json.dumps(chief.get(key), sort_keys=True) != json.dumps(other.get(key), sort_keys=True)
        ]
        if different:
            key = different[0]
            raise MismatchError(
                f"{TF_CONFIG}: {cluster.describe(number + 1)} runs with {key}={other.get(key)}, the chief "
                f"{cluster.describe(0)} with {key}={chief.get(key)}; start every worker with the same command "
                "and inputs"
            )


def lost_worker_error(cluster, error, kept):
    """The `TrainingError` for a collective that failed because a task it names (or whose port is closed)
    was lost, else None; `kept` says where the last complete checkpoint is."""
    number = cluster.lost_task(str(error)) if type(error).__name__ in _LOST_ERRORS else None
    if number is None:
        return None
    return TrainingError(
        f"lost {cluster.describe(number)} ({type(error).__name__} in a collective); {kept}: rerun every "
        "worker with the same command to resume from it"
    )


@contextlib.contextmanager
def worker_directory(cluster):
    """A temporary local directory for what a worker other than the chief writes (its checkpoints,
    logs), removed afterwards; one that a killed worker of this host left, and its lock file, are removed
    first."""
    prefix = f"gtr-keras-{cluster.task_type}{cluster.task_index}-"
    root = tempfile.gettempdir()
    for name in os.listdir(root):
        bare = name.removeprefix(".")  # `.NAME.lock`: the output lock beside the directory
        if bare.startswith(prefix) and not _alive(bare[len(prefix) :].split("-")[0]):
            path = os.path.join(root, name)
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.remove(path)
    path = tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=root)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _alive(pid):
    if not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
