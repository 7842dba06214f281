#!/usr/bin/python3
"""tandem_device_plugin.py at its gRPC boundary, with a fake kubelet.

The test plays the kubelet: it serves the Registration service on
kubelet.sock in a temporary device-plugin folder, starts the plugin (a
subprocess, as the DaemonSet runs it) pointed at that folder and at a socket
root with two GPUs, gpu0 and gpu1, and then calls the plugin's DevicePlugin
service as the kubelet would. Each GPU's "tandemd" is a real CPU tandemd
(TANDEMD, which ctest sets) on gpuN/tandemd.sock, or, without TANDEMD, a
stand-in that answers with a ZeroMQ greeting.

LauncherTest runs manifests/tandemd-per-gpu.sh, the tandemd DaemonSet's
command, with CPU daemons as two GPUs (needs TANDEMD; TANDEMCTL for --check).

Exits 77 (ctest: skipped) when grpc, protobuf or protoc is missing.
"""

import os
import queue
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from concurrent import futures

SKIPPED = 77
HERE = os.path.dirname(os.path.abspath(__file__))
PLUGIN = os.path.join(os.path.dirname(HERE), "tandem_device_plugin.py")
LAUNCHER = os.path.join(os.path.dirname(HERE), "manifests", "tandemd-per-gpu.sh")
SHARES = 4
MEMORY_MIB = {0: 16000, 1: 80000}
HOST_ROOT = "/host/run/tandem"  # the socket root as the kubelet's host sees it, for the mounts

try:
    import grpc
    import google.protobuf  # noqa: F401
    MISSING = None
except ImportError as e:
    MISSING = "%s (Debian: apt-get install python3-grpcio python3-protobuf)" % e
if MISSING is None and not shutil.which("protoc"):
    MISSING = "no protoc (Debian: apt-get install protobuf-compiler)"
if MISSING is None:
    sys.path.insert(0, os.path.dirname(PLUGIN))
    import tandem_device_plugin as dp


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError("timed out after %.0f s waiting for %s" % (timeout, what))


class StandInDaemon:
    """A unix socket that greets like a ZeroMQ peer (ZMTP 3 signature), for runs without tandemd."""

    def __init__(self, path):
        self.path = path
        self.listener = None

    def start(self):
        if os.path.exists(self.path):
            os.unlink(self.path)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(16)
        threading.Thread(target=self._accept, args=(self.listener,), daemon=True).start()

    def _accept(self, listener):
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.sendall(b"\xff" + b"\x00" * 7 + b"\x01\x7f")

    def stop(self):
        """Like a clean exit: the socket file goes."""
        self.listener.close()
        os.unlink(self.path)

    def kill(self):
        """Like SIGKILL: nobody listens, the socket file stays."""
        self.listener.close()


class Tandemd:
    """A CPU tandemd on `path`."""

    def __init__(self, binary, path, log):
        self.binary, self.path, self.log = binary, path, log
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(
            [self.binary, "--device=cpu", "--endpoint=ipc://" + self.path, "--cpu_memory_mib=64",
             "--log_level=warning"], stdout=self.log, stderr=subprocess.STDOUT)

    def _end(self, sig):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=10)

    def stop(self):
        self._end(signal.SIGTERM)

    def kill(self):
        self._end(signal.SIGKILL)


class FakeKubelet:
    """The kubelet's Registration service on kubelet.sock; records each RegisterRequest."""

    def __init__(self, api, path):
        self.requests = queue.Queue()

        def register(request, context):
            self.requests.put(request)
            return api.Empty()

        handler = grpc.method_handlers_generic_handler("v1beta1.Registration", {
            "Register": grpc.unary_unary_rpc_method_handler(
                register, request_deserializer=api.RegisterRequest.FromString,
                response_serializer=api.Empty.SerializeToString)})
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        self.server.add_generic_rpc_handlers((handler,))
        self.server.add_insecure_port("unix://" + path)
        self.server.start()

    def next_registration(self, timeout):
        try:
            return self.requests.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError("the plugin did not register within %.0f s" % timeout)


def health_by_gpu(response):
    """{gpu: set of the health values of its shares} of a ListAndWatchResponse."""
    out = {}
    for d in response.devices:
        out.setdefault(int(d.ID.split("-")[0][3:]), set()).add(d.health)
    return out


class DevicePluginTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        # Class cleanups run even when setUpClass fails part way, so no daemon or plugin outlives the test.
        cls.tmp = tempfile.mkdtemp(prefix="tandem-k8s-")
        cls.addClassCleanup(shutil.rmtree, cls.tmp, True)
        cls.plugin_dir = os.path.join(cls.tmp, "device-plugins")
        cls.socket_root = os.path.join(cls.tmp, "run")
        os.makedirs(cls.plugin_dir)
        cls.api = dp.load_api(os.path.join(cls.tmp, "gen"))
        cls.kubelet = FakeKubelet(cls.api, os.path.join(cls.plugin_dir, "kubelet.sock"))
        cls.addClassCleanup(cls.kubelet.server.stop, None)

        tandemd = os.environ.get("TANDEMD")
        cls.real_daemons = bool(tandemd and os.access(tandemd, os.X_OK))
        cls.daemon_log = open(os.path.join(cls.tmp, "tandemd.log"), "wb")
        cls.addClassCleanup(cls.daemon_log.close)
        cls.daemons = {}
        for gpu, mib in MEMORY_MIB.items():
            folder = os.path.join(cls.socket_root, "gpu%d" % gpu)
            os.makedirs(folder)
            with open(os.path.join(folder, "memory_mib"), "w") as f:  # as the launcher writes it
                f.write("%d\n" % mib)
            path = os.path.join(folder, "tandemd.sock")
            cls.daemons[gpu] = Tandemd(tandemd, path, cls.daemon_log) if cls.real_daemons else StandInDaemon(path)
            cls.daemons[gpu].start()
            cls.addClassCleanup(cls.daemons[gpu].kill)
        for gpu, daemon in cls.daemons.items():
            wait_for(lambda: dp.probe_tandemd(daemon.path, 0.5), 10, "GPU %d's daemon to answer" % gpu)

        # --gpus is left at auto: the plugin finds gpu0 and gpu1 as folders under the socket root.
        cls.plugin_log = open(os.path.join(cls.tmp, "plugin.log"), "w+")
        cls.addClassCleanup(cls.plugin_log.close)
        cls.plugin = subprocess.Popen(
            [sys.executable, PLUGIN, "--plugin-dir=" + cls.plugin_dir, "--socket-root=" + cls.socket_root,
             "--host-socket-root=" + HOST_ROOT, "--shares-per-gpu=%d" % SHARES, "--health-interval=0.1",
             "--probe-timeout=0.5", "--register-timeout=2", "--proto-module-dir=" + os.path.join(cls.tmp, "gen")],
            stdout=cls.plugin_log, stderr=subprocess.STDOUT)
        cls.addClassCleanup(cls.end_plugin)
        cls.registration = cls.kubelet.next_registration(timeout=10)

    @classmethod
    def end_plugin(cls):
        if cls.plugin.poll() is None:
            cls.plugin.kill()
            cls.plugin.wait()
        cls.plugin_log.seek(0)
        sys.stderr.write("--- the plugin's log ---\n" + cls.plugin_log.read())

    def call(self, method, request, response_type):
        channel = grpc.insecure_channel("unix://" + os.path.join(self.plugin_dir, self.registration.endpoint))
        self.addCleanup(channel.close)
        stub = channel.unary_unary("/v1beta1.DevicePlugin/" + method,
                                   request_serializer=type(request).SerializeToString,
                                   response_deserializer=response_type.FromString)
        return stub(request, timeout=5)

    def allocate(self, *containers):
        api = self.api
        request = api.AllocateRequest(container_requests=[api.ContainerAllocateRequest(devices_ids=ids)
                                                          for ids in containers])
        return self.call("Allocate", request, api.AllocateResponse)

    def assert_refused(self, code, *containers):
        with self.assertRaises(grpc.RpcError) as cm:
            self.allocate(*containers)
        self.assertEqual(cm.exception.code(), code, cm.exception.details())
        return cm.exception.details()

    def watch(self):
        channel = grpc.insecure_channel("unix://" + os.path.join(self.plugin_dir, self.registration.endpoint))
        self.addCleanup(channel.close)
        stream = channel.unary_stream("/v1beta1.DevicePlugin/ListAndWatch",
                                      request_serializer=self.api.Empty.SerializeToString,
                                      response_deserializer=self.api.ListAndWatchResponse.FromString)
        responses = stream(self.api.Empty(), timeout=15)
        self.addCleanup(responses.cancel)
        return responses

    def next_until(self, responses, want):
        """Reads the stream until a response whose health by GPU is `want`."""
        seen = []
        for r in responses:
            seen.append(health_by_gpu(r))
            if seen[-1] == want:
                return r
        self.fail("the stream ended before %s; it sent %s" % (want, seen))

    def test_00_registers_resource_and_endpoint(self):
        r = self.registration
        self.assertEqual(r.version, "v1beta1")
        self.assertEqual(r.resource_name, "tandem.dev/gpu-share")
        self.assertEqual(r.endpoint, "tandem-gpu-share.sock")
        self.assertTrue(r.options.get_preferred_allocation_available)
        self.assertFalse(r.options.pre_start_required)
        # The plugin serves on that name in the kubelet's folder by the time it registers.
        self.assertTrue(os.path.exists(os.path.join(self.plugin_dir, r.endpoint)))
        options = self.call("GetDevicePluginOptions", self.api.Empty(), self.api.DevicePluginOptions)
        self.assertEqual(options, r.options)

    def test_10_list_and_watch_lists_healthy_shares(self):
        first = next(self.watch())
        self.assertEqual(sorted(d.ID for d in first.devices),
                         sorted("gpu%d-share%d" % (g, s) for g in MEMORY_MIB for s in range(SHARES)))
        self.assertEqual({d.health for d in first.devices}, {"Healthy"})

    def test_20_allocate_mounts_the_gpus_socket_folder(self):
        response = self.allocate(["gpu1-share0", "gpu1-share2"], ["gpu0-share3"])
        self.assertEqual(len(response.container_responses), 2)
        for container, gpu, shares in ((response.container_responses[0], 1, 2),
                                       (response.container_responses[1], 0, 1)):
            self.assertEqual(len(container.mounts), 1)
            mount = container.mounts[0]
            self.assertEqual(mount.host_path, "%s/gpu%d" % (HOST_ROOT, gpu))
            self.assertEqual(mount.container_path, "/run/tandem")
            self.assertTrue(mount.read_only)
            self.assertEqual(dict(container.envs), {
                "TANDEM_ENDPOINT": "ipc:///run/tandem/tandemd.sock",
                "TANDEM_MEMORY_QUOTA_MIB": str(MEMORY_MIB[gpu] * shares // SHARES)})
            self.assertEqual(len(container.devices), 0)
        self.call("PreStartContainer", self.api.PreStartContainerRequest(devices_ids=["gpu1-share0"]),
                  self.api.PreStartContainerResponse)

    def test_30_shares_of_two_gpus_are_refused(self):
        details = self.assert_refused(grpc.StatusCode.FAILED_PRECONDITION, ["gpu0-share0", "gpu1-share0"])
        self.assertIn("one GPU", details)

    def test_40_bad_requests_are_invalid_arguments(self):
        for ids in (["gpu7-share0"], ["gpu0-share%d" % SHARES], ["gpu0-share01"], ["nvidia0"], [],
                    ["gpu0-share1", "gpu0-share1"]):
            with self.subTest(ids=ids):
                details = self.assert_refused(grpc.StatusCode.INVALID_ARGUMENT, ["gpu1-share1"], ids)
                if ids and ids[0] == "gpu7-share0":
                    self.assertIn("unknown device 'gpu7-share0'", details)

    def test_50_preferred_allocation_keeps_a_container_on_one_gpu(self):
        api = self.api

        def prefer(available, size, must=()):
            request = api.PreferredAllocationRequest(container_requests=[api.ContainerPreferredAllocationRequest(
                available_deviceIDs=available, must_include_deviceIDs=must, allocation_size=size)])
            response = self.call("GetPreferredAllocation", request, api.PreferredAllocationResponse)
            return list(response.container_responses[0].deviceIDs)

        everything = ["gpu%d-share%d" % (g, s) for g in (0, 1) for s in range(SHARES)]
        # pack: of the GPUs where 2 fit, the one with the fewest free shares (GPU 1, 3 free).
        self.assertEqual(prefer(everything[:4] + everything[5:], 2), ["gpu1-share1", "gpu1-share2"])
        # A must-include share brings the rest from its GPU.
        self.assertEqual(prefer(everything, 3, must=["gpu0-share2"]), ["gpu0-share2", "gpu0-share0", "gpu0-share1"])
        # No GPU has 3 free: the most from one GPU, then the next.
        self.assertEqual(prefer(["gpu0-share0", "gpu0-share1", "gpu1-share3"], 3),
                         ["gpu0-share0", "gpu0-share1", "gpu1-share3"])

    def test_60_shares_turn_unhealthy_while_their_daemon_is_gone(self):
        responses = self.watch()
        healthy = {0: {"Healthy"}, 1: {"Healthy"}}
        gpu1_down = {0: {"Healthy"}, 1: {"Unhealthy"}}
        self.next_until(responses, healthy)
        daemon = self.daemons[1]
        # A clean exit: the socket goes.
        daemon.stop()
        self.assertFalse(os.path.exists(daemon.path))
        self.next_until(responses, gpu1_down)
        daemon.start()
        self.next_until(responses, healthy)
        # Killed: the socket file stays, nobody answers.
        daemon.kill()
        self.assertTrue(os.path.exists(daemon.path))
        self.next_until(responses, gpu1_down)
        # A new subscriber (a restarted kubelet) is told at once.
        self.assertEqual(health_by_gpu(next(self.watch())), gpu1_down)
        daemon.start()
        self.next_until(responses, healthy)

    def test_70_probe_needs_a_zeromq_greeting(self):
        silent = os.path.join(self.tmp, "silent.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.addCleanup(listener.close)
        listener.bind(silent)
        listener.listen(1)
        started = time.monotonic()
        self.assertFalse(dp.probe_tandemd(silent, 0.3))  # accepts (backlog), says nothing
        self.assertLess(time.monotonic() - started, 2)
        self.assertFalse(dp.probe_tandemd(os.path.join(self.socket_root, "gpu0", "memory_mib"), 0.3))  # a file
        self.assertFalse(dp.probe_tandemd(os.path.join(self.tmp, "nothing.sock"), 0.3))
        self.assertTrue(dp.probe_tandemd(self.daemons[0].path, 0.5))

    def test_80_settings_parse(self):
        self.assertIsNone(dp.parse_gpus("auto"))
        self.assertEqual(dp.parse_gpus("2, 0,2"), [2, 0])
        self.assertEqual(dp.parse_memory("81559"), {"*": 81559})
        self.assertEqual(dp.parse_memory("0=81559,1=40000"), {0: 81559, 1: 40000})
        for bad in ("", "x", "-1"):
            with self.subTest(gpus=bad), self.assertRaises(Exception):
                dp.parse_gpus(bad)

    def test_90_serves_and_registers_again_after_a_kubelet_restart(self):
        # A starting kubelet empties its folder, the plugin's socket with it.
        os.unlink(os.path.join(self.plugin_dir, self.registration.endpoint))
        again = self.kubelet.next_registration(timeout=10)
        self.assertEqual((again.resource_name, again.endpoint),
                         (self.registration.resource_name, self.registration.endpoint))
        self.assertEqual(len(next(self.watch()).devices), SHARES * len(MEMORY_MIB))

    def test_99_sigterm_stops_and_removes_the_socket(self):
        self.plugin.send_signal(signal.SIGTERM)
        self.assertEqual(self.plugin.wait(timeout=10), 0)
        self.assertFalse(os.path.exists(os.path.join(self.plugin_dir, self.registration.endpoint)))


@unittest.skipUnless(os.access(os.environ.get("TANDEMD", ""), os.X_OK) and shutil.which("bash"),
                     "needs TANDEMD (a tandemd binary) and bash")
class LauncherTest(unittest.TestCase):
    """manifests/tandemd-per-gpu.sh, the tandemd DaemonSet's command, with CPU daemons as two GPUs."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="tandem-k8s-launcher-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.root = os.path.join(self.tmp, "run")
        tandemctl = os.environ.get("TANDEMCTL", "")
        self.env = dict(os.environ, TANDEM_SOCKET_ROOT=self.root, TANDEM_GPUS="0,1",
                        TANDEMD_OPTS="--device=cpu --cpu_memory_mib=64 --log_level=warning",
                        TANDEM_LAUNCHER_STATE=os.path.join(self.tmp, "state"),
                        TANDEMCTL=tandemctl if os.access(tandemctl, os.X_OK) else "tandemctl")  # for --check
        self.log = open(os.path.join(self.tmp, "launcher.log"), "w+")
        self.addCleanup(self.log.close)
        self.launcher = subprocess.Popen(["bash", LAUNCHER], env=self.env, stdout=self.log, stderr=subprocess.STDOUT)
        self.addCleanup(self.end_launcher)
        self.sockets = [os.path.join(self.root, "gpu%d" % g, "tandemd.sock") for g in (0, 1)]
        for path in self.sockets:
            wait_for(lambda: dp.probe_tandemd(path, 0.5), 10, path + " to answer")

    def end_launcher(self):
        if self.launcher.poll() is None:
            self.launcher.send_signal(signal.SIGTERM)
            self.launcher.wait(timeout=10)

    def pids(self):
        with open(self.env["TANDEM_LAUNCHER_STATE"]) as f:
            return {int(gpu): int(pid) for gpu, pid in (line.split() for line in f)}

    def test_one_daemon_per_gpu_in_group_folders(self):
        for gpu in (0, 1):
            st = os.stat(os.path.join(self.root, "gpu%d" % gpu))
            self.assertEqual(stat.S_IMODE(st.st_mode), 0o750)
            self.assertEqual(st.st_gid, os.getgid())
        self.assertEqual(sorted(self.pids()), [0, 1])
        if shutil.which(self.env["TANDEMCTL"]):
            check = subprocess.run(["bash", LAUNCHER, "--check"], env=self.env, capture_output=True, text=True)
            self.assertEqual(check.returncode, 0, check.stderr)
        self.launcher.send_signal(signal.SIGTERM)
        self.assertEqual(self.launcher.wait(timeout=10), 0)
        self.assertFalse(any(os.path.exists(p) for p in self.sockets))

    def test_a_daemon_exiting_stops_the_rest(self):
        os.kill(self.pids()[1], signal.SIGKILL)
        self.assertEqual(self.launcher.wait(timeout=10), 128 + signal.SIGKILL)
        self.assertFalse(os.path.exists(self.sockets[0]))  # GPU 0's daemon was stopped cleanly
        self.log.seek(0)
        self.assertIn("a daemon exited", self.log.read())


if __name__ == "__main__":
    if MISSING:
        print("SKIPPED: the Kubernetes device plugin test needs grpc, protobuf and protoc: %s" % MISSING)
        sys.exit(SKIPPED)
    unittest.main()
