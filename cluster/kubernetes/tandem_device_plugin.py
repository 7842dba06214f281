#!/usr/bin/python3
"""Kubernetes device plugin for Tandem: shares of each GPU's tandemd as a resource.

Each GPU N of the node has its own tandemd on SOCKET_ROOT/gpuN/tandemd.sock
(manifests/tandemd-per-gpu.sh starts them). The plugin advertises
--shares-per-gpu devices per GPU, named gpuN-shareM, as the extended resource
--resource-name (tandem.dev/gpu-share), through the kubelet's device-plugin
API v1beta1 (deviceplugin_v1beta1.proto):

- It serves the DevicePlugin service on PLUGIN_DIR/ENDPOINT and registers
  with the kubelet's Registration service on PLUGIN_DIR/kubelet.sock; when the
  kubelet restarts (it empties PLUGIN_DIR) the plugin serves and registers
  again.
- ListAndWatch streams the shares; a GPU's shares are Unhealthy while its
  tandemd socket is missing or does not answer with a ZeroMQ greeting.
- Allocate of k shares of GPU N bind-mounts the host's SOCKET_ROOT/gpuN into
  the container at --container-socket-dir (read-only) and sets TANDEM_ENDPOINT
  to the socket there; when the GPU's memory is known it sets
  TANDEM_MEMORY_QUOTA_MIB to k/shares of it. A container's shares must all
  be of one GPU (it talks to one tandemd); a request that spans GPUs is
  refused with FAILED_PRECONDITION. GetPreferredAllocation steers the kubelet
  to shares of one GPU.

Needs grpcio and protobuf (Debian: python3-grpcio python3-protobuf) and the
module protoc generates from deviceplugin_v1beta1.proto: importable as
deviceplugin_v1beta1_pb2 (--proto-module-dir), else compiled at start with
protoc (protobuf-compiler) into a temporary folder.
"""

import argparse
import importlib
import logging
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
from concurrent import futures

import grpc

API_VERSION = "v1beta1"
KUBELET_SOCKET = "kubelet.sock"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
PROTO_NAME = "deviceplugin_v1beta1"
PROTO_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), PROTO_NAME + ".proto")
GPU_DIR = re.compile(r"^gpu(\d+)$")
DEVICE_ID = re.compile(r"^gpu(\d+)-share(\d+)$")
# A ZeroMQ peer (ZMTP 3) sends a 10-byte signature as soon as it accepts: 0xFF, 8 bytes, 0x7F.
ZMTP_SIGNATURE_BYTES = 10

log = logging.getLogger("tandem-device-plugin")


def load_api(module_dir=None):
    """The module protoc generates from deviceplugin_v1beta1.proto.

    Imported from module_dir (or sys.path) when it is there; otherwise the .proto
    is compiled with protoc into module_dir (a new temporary folder when None).
    """
    if module_dir:
        module_dir = os.path.abspath(module_dir)
        if module_dir not in sys.path:
            sys.path.insert(0, module_dir)
    try:
        return importlib.import_module(PROTO_NAME + "_pb2")
    except ImportError:
        pass
    protoc = shutil.which("protoc")
    if not protoc:
        raise RuntimeError("no %s_pb2 module and no protoc to make one (install protobuf-compiler)" % PROTO_NAME)
    if not module_dir:
        module_dir = tempfile.mkdtemp(prefix="tandem-device-plugin-")
        sys.path.insert(0, module_dir)
    os.makedirs(module_dir, exist_ok=True)
    subprocess.run([protoc, "-I", os.path.dirname(PROTO_FILE), "--python_out=" + module_dir, PROTO_FILE],
                   check=True)
    importlib.invalidate_caches()
    return importlib.import_module(PROTO_NAME + "_pb2")


def probe_tandemd(path, timeout):
    """True when something at the unix socket `path` answers as a ZeroMQ peer does.

    Connects, reads the ZMTP signature the peer sends on accepting, and hangs up
    before the handshake goes further (the daemon drops such a connection
    silently). A missing file, a socket nobody listens on (a daemon that was
    killed) and a peer that sends nothing within `timeout` are all False.
    """
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(path)
            data = b""
            while len(data) < ZMTP_SIGNATURE_BYTES:
                chunk = s.recv(ZMTP_SIGNATURE_BYTES - len(data))
                if not chunk:
                    return False
                data += chunk
            return data[0] == 0xFF and data[9] == 0x7F
    except OSError:
        return False


def parse_gpus(text):
    """--gpus: "auto" (None) or a comma-separated list of GPU indexes."""
    if text.strip() == "auto":
        return None
    gpus = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit():
            raise argparse.ArgumentTypeError("expected 'auto' or GPU indexes like 0,1,2; got %r" % text)
        if int(part) not in gpus:
            gpus.append(int(part))
    if not gpus:
        raise argparse.ArgumentTypeError("no GPU in %r" % text)
    return gpus


def parse_memory(text):
    """--gpu-memory-mib: "auto" (None), one MiB value for every GPU, or "N=MIB,N=MIB"."""
    text = text.strip()
    if text == "auto":
        return None
    if text.isdigit():
        return {"*": int(text)}
    memory = {}
    for part in text.split(","):
        gpu, _, mib = part.strip().partition("=")
        if not (gpu.strip().isdigit() and mib.strip().isdigit()):
            raise argparse.ArgumentTypeError("expected 'auto', MIB or GPU=MIB,GPU=MIB; got %r" % text)
        memory[int(gpu)] = int(mib)
    return memory


def device_id(gpu, share):
    return "gpu%d-share%d" % (gpu, share)


class SharePlugin:
    """The DevicePlugin service and the state behind it: the GPUs and their health."""

    def __init__(self, api, args):
        self.api = api
        self.args = args
        self._cond = threading.Condition()
        self._health = {}  # GPU index -> bool, every GPU seen so far
        self._version = 0  # bumped whenever _health changes; ListAndWatch streams send on a change
        self._stopping = False

    # --- GPUs and health -------------------------------------------------

    def socket_dir(self, gpu):
        return os.path.join(self.args.socket_root, "gpu%d" % gpu)

    def host_socket_dir(self, gpu):
        return os.path.join(self.args.host_socket_root or self.args.socket_root, "gpu%d" % gpu)

    def discover(self):
        """The GPUs: --gpus, or with auto the gpuN folders under the socket root."""
        if self.args.gpus is not None:
            return list(self.args.gpus)
        try:
            names = os.listdir(self.args.socket_root)
        except OSError:
            return []
        return [int(m.group(1)) for m in map(GPU_DIR.match, names)
                if m and os.path.isdir(os.path.join(self.args.socket_root, m.group(0)))]

    def refresh(self):
        """Probes every GPU's tandemd; wakes the ListAndWatch streams when anything changed."""
        gpus = set(self._health) | set(self.discover())  # a GPU once seen stays, Unhealthy when gone
        health = {g: probe_tandemd(os.path.join(self.socket_dir(g), self.args.socket_name), self.args.probe_timeout)
                  for g in sorted(gpus)}
        with self._cond:
            if health == self._health:
                return
            for g in sorted(health):
                if self._health.get(g) != health[g]:
                    log.info("GPU %d: tandemd at %s %s", g, os.path.join(self.socket_dir(g), self.args.socket_name),
                             "answers" if health[g] else "does not answer; its shares are Unhealthy")
            self._health = health
            self._version += 1
            self._cond.notify_all()

    def stop_streams(self):
        with self._cond:
            self._stopping = True
            self._cond.notify_all()

    def _devices_locked(self):
        return [self.api.Device(ID=device_id(g, s), health=HEALTHY if ok else UNHEALTHY)
                for g, ok in sorted(self._health.items()) for s in range(self.args.shares_per_gpu)]

    def gpu_of(self, dev_id):
        """The GPU of a share's id, or None when the id is not one of this plugin's."""
        m = DEVICE_ID.match(dev_id)
        if not m:
            return None
        gpu, share = int(m.group(1)), int(m.group(2))
        with self._cond:
            known = gpu in self._health
        if not known or share >= self.args.shares_per_gpu or dev_id != device_id(gpu, share):
            return None
        return gpu

    def memory_mib(self, gpu):
        """The GPU's memory in MiB for the quota: --gpu-memory-mib, or with auto the
        gpuN/memory_mib file the launcher writes; None when unknown."""
        memory = self.args.gpu_memory_mib
        if memory is not None:
            return memory.get(gpu, memory.get("*"))
        try:
            with open(os.path.join(self.socket_dir(gpu), "memory_mib")) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            return None

    # --- the DevicePlugin service -----------------------------------------

    def options(self):
        return self.api.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)

    def GetDevicePluginOptions(self, request, context):
        return self.options()

    def ListAndWatch(self, request, context):
        sent = None
        while context.is_active():
            with self._cond:
                if self._version == sent and not self._stopping:
                    self._cond.wait(timeout=1.0)
                if self._stopping:
                    return
                if self._version == sent:
                    continue
                sent = self._version
                response = self.api.ListAndWatchResponse(devices=self._devices_locked())
            yield response

    def GetPreferredAllocation(self, request, context):
        response = self.api.PreferredAllocationResponse()
        for creq in request.container_requests:
            response.container_responses.add(deviceIDs=self.prefer(
                list(creq.available_deviceIDs), list(creq.must_include_deviceIDs), creq.allocation_size))
        return response

    def prefer(self, available, must, size):
        """Shares of one GPU where one has enough: the GPU of the must-include shares,
        else (--placement) the GPU that fits with the fewest free shares (pack) or
        the one with the most (spread). Without such a GPU the most from one GPU first."""
        by_gpu = {}
        for d in available:
            g = self.gpu_of(d)
            if g is not None and d not in must:
                by_gpu.setdefault(g, []).append(d)
        chosen = list(must)
        need = size - len(chosen)
        if need <= 0:
            return chosen
        must_gpus = {self.gpu_of(d) for d in must}
        if len(must_gpus) == 1 and None not in must_gpus:
            order = sorted(by_gpu, key=lambda g: (g not in must_gpus, -len(by_gpu[g]), g))
        else:
            fits = [g for g in by_gpu if len(by_gpu[g]) >= need]
            if self.args.placement == "pack":
                first = sorted(fits, key=lambda g: (len(by_gpu[g]), g))
            else:
                first = sorted(fits, key=lambda g: (-len(by_gpu[g]), g))
            order = first + sorted((g for g in by_gpu if g not in fits), key=lambda g: (-len(by_gpu[g]), g))
        for g in order:
            take = sorted(by_gpu[g], key=lambda d: int(DEVICE_ID.match(d).group(2)))[:need]
            chosen += take
            need -= len(take)
            if need == 0:
                break
        return chosen

    def Allocate(self, request, context):
        allocations = []  # (GPU, ids) per container, every request checked before any is answered
        for creq in request.container_requests:
            ids = list(creq.devices_ids)
            if not ids:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, "a container request names no device")
            if len(set(ids)) != len(ids):
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, "a container request names a device twice: %s" % ids)
            gpus = set()
            for d in ids:
                g = self.gpu_of(d)
                if g is None:
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                  "unknown device %r: this plugin's devices are gpuN-shareM, M < %d, for GPUs %s"
                                  % (d, self.args.shares_per_gpu, sorted(self._health)))
                gpus.add(g)
            if len(gpus) > 1:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                              "the shares of one container must be of one GPU (it talks to that GPU's tandemd); "
                              "these are of GPUs %s: %s" % (sorted(gpus), ids))
            allocations.append((gpus.pop(), ids))
        response = self.api.AllocateResponse()
        for gpu, ids in allocations:
            response.container_responses.append(self.container_response(gpu, len(ids)))
            log.info("allocated %s: GPU %d, %d/%d shares", ids, gpu, len(ids), self.args.shares_per_gpu)
        return response

    def container_response(self, gpu, shares):
        resp = self.api.ContainerAllocateResponse()
        container_dir = self.args.container_socket_dir
        resp.envs["TANDEM_ENDPOINT"] = "ipc://" + os.path.join(container_dir, self.args.socket_name)
        memory = self.memory_mib(gpu)
        if memory:
            resp.envs["TANDEM_MEMORY_QUOTA_MIB"] = str(memory * shares // self.args.shares_per_gpu)
        # The folder, not the socket: a restarted tandemd's new socket shows in running containers.
        # Read-only: connecting to a socket needs no write access to the mount, and no container
        # may replace the socket that the GPU's other containers connect to.
        resp.mounts.add(container_path=container_dir, host_path=self.host_socket_dir(gpu), read_only=True)
        return resp

    def PreStartContainer(self, request, context):
        return self.api.PreStartContainerResponse()

    def handler(self):
        api = self.api

        def unary(method, request_type, response_type):
            return grpc.unary_unary_rpc_method_handler(method, request_deserializer=request_type.FromString,
                                                       response_serializer=response_type.SerializeToString)

        return grpc.method_handlers_generic_handler("v1beta1.DevicePlugin", {
            "GetDevicePluginOptions": unary(self.GetDevicePluginOptions, api.Empty, api.DevicePluginOptions),
            "ListAndWatch": grpc.unary_stream_rpc_method_handler(
                self.ListAndWatch, request_deserializer=api.Empty.FromString,
                response_serializer=api.ListAndWatchResponse.SerializeToString),
            "GetPreferredAllocation": unary(self.GetPreferredAllocation, api.PreferredAllocationRequest,
                                            api.PreferredAllocationResponse),
            "Allocate": unary(self.Allocate, api.AllocateRequest, api.AllocateResponse),
            "PreStartContainer": unary(self.PreStartContainer, api.PreStartContainerRequest,
                                       api.PreStartContainerResponse),
        })


class Runner:
    """Serves the plugin's socket, registers with the kubelet, and keeps both up."""

    def __init__(self, plugin, args):
        self.plugin = plugin
        self.args = args
        self.socket_path = os.path.join(args.plugin_dir, args.endpoint)
        self.server = None
        self.socket_id = None  # (st_dev, st_ino) of the socket the server made
        self.registered = False
        self.stop_event = threading.Event()

    def serve(self):
        if self.server is not None:
            self.server.stop(grace=None)
        try:
            os.unlink(self.socket_path)
        except FileNotFoundError:
            pass
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="rpc"))
        self.server.add_generic_rpc_handlers((self.plugin.handler(),))
        self.server.add_insecure_port("unix://" + os.path.abspath(self.socket_path))
        self.server.start()
        st = os.stat(self.socket_path)
        self.socket_id = (st.st_dev, st.st_ino)
        self.registered = False
        log.info("serving %s on %s", self.args.resource_name, self.socket_path)

    def socket_intact(self):
        try:
            st = os.stat(self.socket_path)
        except FileNotFoundError:
            return False
        return stat.S_ISSOCK(st.st_mode) and (st.st_dev, st.st_ino) == self.socket_id

    def register(self):
        api = self.plugin.api
        kubelet = os.path.abspath(os.path.join(self.args.plugin_dir, KUBELET_SOCKET))
        request = api.RegisterRequest(version=API_VERSION, endpoint=self.args.endpoint,
                                      resource_name=self.args.resource_name, options=self.plugin.options())
        try:
            with grpc.insecure_channel("unix://" + kubelet) as channel:
                call = channel.unary_unary("/v1beta1.Registration/Register",
                                           request_serializer=api.RegisterRequest.SerializeToString,
                                           response_deserializer=api.Empty.FromString)
                call(request, timeout=self.args.register_timeout)
        except grpc.RpcError as e:
            log.warning("registering with the kubelet at %s failed (%s: %s); trying again", kubelet, e.code(),
                        e.details())
            return False
        log.info("registered %s with the kubelet at %s", self.args.resource_name, kubelet)
        self.registered = True
        return True

    def run(self):
        self.plugin.refresh()
        self.serve()
        while not self.stop_event.is_set():
            if not self.socket_intact():
                # The kubelet empties its folder when it starts: serve again and register anew.
                log.info("%s is gone (the kubelet restarted?); serving and registering again", self.socket_path)
                self.serve()
            if not self.registered:
                self.register()
            self.stop_event.wait(self.args.health_interval)
            self.plugin.refresh()
        self.shutdown()

    def shutdown(self):
        self.plugin.stop_streams()
        if self.server is not None:
            self.server.stop(grace=1.0).wait()
        if self.socket_intact():
            os.unlink(self.socket_path)
        log.info("stopped")


def parse_args(argv):
    p = argparse.ArgumentParser(description="Kubernetes device plugin advertising shares of each GPU's tandemd.")
    p.add_argument("--resource-name", default="tandem.dev/gpu-share",
                   help="the extended resource (default: %(default)s)")
    p.add_argument("--shares-per-gpu", type=int, default=4, help="devices advertised per GPU (default: %(default)s)")
    p.add_argument("--gpus", type=parse_gpus, default=None, metavar="auto|N,N...",
                   help="the node's GPUs; auto: the gpuN folders under --socket-root (default: auto)")
    p.add_argument("--socket-root", default="/run/tandem",
                   help="where this process sees gpuN/tandemd.sock (default: %(default)s)")
    p.add_argument("--host-socket-root", default=None,
                   help="the same folder as the host (the kubelet) sees it, for the mounts (default: --socket-root)")
    p.add_argument("--socket-name", default="tandemd.sock", help="the socket's name in gpuN (default: %(default)s)")
    p.add_argument("--container-socket-dir", default="/run/tandem",
                   help="where a container sees its GPU's socket folder (default: %(default)s)")
    p.add_argument("--gpu-memory-mib", type=parse_memory, default=None, metavar="auto|MIB|N=MIB,...",
                   help="GPU memory for TANDEM_MEMORY_QUOTA_MIB; auto: gpuN/memory_mib under --socket-root, "
                        "where present (default: auto)")
    p.add_argument("--placement", choices=("pack", "spread"), default="pack",
                   help="preferred GPU for a request: pack (fewest free shares that fit) or spread (most free); "
                        "default: %(default)s")
    p.add_argument("--plugin-dir", default="/var/lib/kubelet/device-plugins",
                   help="the kubelet's device-plugin folder (default: %(default)s)")
    p.add_argument("--endpoint", default="tandem-gpu-share.sock",
                   help="this plugin's socket name in --plugin-dir (default: %(default)s)")
    p.add_argument("--health-interval", type=float, default=5.0,
                   help="seconds between health probes (default: %(default)s)")
    p.add_argument("--probe-timeout", type=float, default=1.0,
                   help="seconds a tandemd has to answer a probe (default: %(default)s)")
    p.add_argument("--register-timeout", type=float, default=5.0, help=argparse.SUPPRESS)
    p.add_argument("--proto-module-dir", default=None,
                   help="folder with (or for) the module protoc generates from deviceplugin_v1beta1.proto")
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    args = p.parse_args(argv)
    if args.shares_per_gpu < 1:
        p.error("--shares-per-gpu must be at least 1")
    if not os.path.isabs(args.container_socket_dir):
        p.error("--container-socket-dir must be an absolute path")
    if os.sep in args.endpoint:
        p.error("--endpoint is a socket name in --plugin-dir, not a path")
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=getattr(logging, args.log_level.upper()),
                        format="%(asctime)s %(levelname).1s %(name)s: %(message)s")
    api = load_api(args.proto_module_dir)
    runner = Runner(SharePlugin(api, args), args)

    def stop(signum, frame):
        log.info("stopping (%s)", signal.Signals(signum).name)
        runner.stop_event.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    runner.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
