"""The data-service command: a tf.data service dispatcher or worker, which
serves pre-training batches made on CPU hosts to the trainers."""

import os
import signal
import sys
import time

# What TensorFlow's data-service server can listen on: its gRPC server binds
# every interface of the host, with no option for one address, and no
# authentication ("grpc" is the only protocol it has outside Google).
ALL_INTERFACES = ("0.0.0.0", "::", "*")

EXPOSED = (
    "the tf.data service runs any dataset graph a client sends, unauthenticated, as this user "
    "(a graph can read and write files), and TensorFlow's server listens on every interface of "
    "this host"
)


def add_data_service(sub):
    p = sub.add_parser(
        "data-service",
        help="run a tf.data service dispatcher or worker (input made on CPU hosts)",
        description=(
            "Starts a tf.data service server and blocks until it is stopped (Ctrl-C, SIGTERM): "
            "one dispatcher per job, and workers on the hosts with spare CPUs. Trainers read "
            "through it with bertzoo.data.service.records_dataset_via_service(..., "
            "service='HOST:PORT'). Workers read the record files themselves: give them paths "
            "that mean the same on every host (a shared mount)."
        ),
    )
    roles = p.add_subparsers(dest="role", required=True)
    bind_help = (
        "required: 0.0.0.0 (every interface, the only address TensorFlow's server can listen "
        "on). Run it only on a private network behind a firewall (docs/scale-out.md, Security)"
    )
    d = roles.add_parser("dispatcher", help="hand out work to the workers")
    d.add_argument("--bind", metavar="ADDRESS", help=bind_help)
    d.add_argument("--port", type=int, default=5050, help="0: any free port (default 5050)")
    d.add_argument("--work-dir", help="keep the dispatcher's state here")
    d.add_argument(
        "--fault-tolerant",
        action="store_true",
        help="journal the state in --work-dir before every answer, so a restart resumes the jobs",
    )
    w = roles.add_parser("worker", help="run input pipelines for a dispatcher")
    w.add_argument("--bind", metavar="ADDRESS", help=bind_help)
    w.add_argument("--dispatcher", required=True, metavar="HOST:PORT", help="grpc://HOST:PORT too")
    w.add_argument("--port", type=int, default=0, help="0: any free port (default)")
    w.add_argument(
        "--host",
        help="the name trainers reach this worker by (default: this machine's fully qualified name)",
    )


def data_service_command(args):
    """`data-service`: runs until stopped; exit status 2 on bad input."""
    from bertzoo.data import service
    from bertzoo.errors import BertzooError

    problem = _bind_problem(args.bind)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        if args.role == "dispatcher":
            server = service.start_dispatcher(args.port, args.work_dir, args.fault_tolerant)
            what = "dispatcher"
        else:
            server = service.start_worker(args.dispatcher, args.port, args.host)
            what = f"worker of {service.parse_address(args.dispatcher)}"
    except (BertzooError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(
        f"warning: {EXPOSED}: keep it on a private network, behind a firewall that admits only "
        "the trainers and workers (docs/scale-out.md, Security).",
        file=sys.stderr,
        flush=True,
    )
    port = server._address.rsplit(":", 1)[1]
    # Ctrl-C and SIGTERM stop the server, even where this process was started
    # with them ignored (a background job of a non-interactive shell inherits
    # SIGINT ignored, and Python then never raises KeyboardInterrupt).
    for stop_signal in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop_signal, signal.default_int_handler)
    try:
        print(
            f"tf.data service {what} listening on port {port} of every interface; Ctrl-C stops it.",
            flush=True,
        )
        while True:  # not server.join(): Ctrl-C cannot interrupt a wait inside TensorFlow
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    # The process ends here, without server.stop(): TensorFlow's stop (and its
    # teardown of the gRPC threads at interpreter exit) can wait indefinitely
    # while holding the interpreter, as seen on a busy 2-core machine. A
    # stopped worker is one that died to the dispatcher, which hands its work
    # to the others; a fault-tolerant dispatcher has journalled its state.
    print(f"tf.data service {what} stopped.", flush=True)
    _exit(0)


def _exit(status):
    """Ends the process at once, with its output flushed."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)


def _bind_problem(bind):
    """Why `--bind` cannot be served (None when it can): private by default
    means not started until the user says it may listen on every interface,
    since TensorFlow's server cannot listen on one."""
    if bind is None:
        return (
            f"{EXPOSED}: it cannot listen on loopback only. Start it with --bind 0.0.0.0 on a "
            "private network behind a firewall (docs/scale-out.md, Security)."
        )
    if bind not in ALL_INTERFACES:
        return (
            f"--bind {bind}: TensorFlow's data-service server cannot listen on one address; it "
            "listens on every interface. Use --bind 0.0.0.0 behind a firewall that admits only "
            "the trainers and workers (docs/scale-out.md, Security)."
        )
    return None
