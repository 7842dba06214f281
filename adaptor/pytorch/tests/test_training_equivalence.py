"""20 training steps of the five tiny reference models through tandemd equal the same steps in PyTorch
(float32, relative 1e-4 for every loss and every final weight), for SGD with momentum and for Adam.

One CPU tandemd serves the whole module. A model whose ops are not all in Tandem's registry fails with a
"MISSING OP" message naming the op and the module it came from.
"""

import unittest
from unittest import mock

import common  # noqa: F401  (paths)
from common import EquivalenceMixin, ModuleDaemon, models, tandem, torch

_daemon = ModuleDaemon()
setUpModule, tearDownModule = _daemon.start, _daemon.stop


def sgd_momentum(lr):
    return lambda params: torch.optim.SGD(params, lr=lr, momentum=0.9)


def adam(lr, eps=1e-8):
    return lambda params: torch.optim.Adam(params, lr=lr, eps=eps)


class TrainingEquivalenceTest(EquivalenceMixin, unittest.TestCase):
    def test_mlp_sgd_momentum(self):
        self.run_both(_daemon.endpoint, "mlp", sgd_momentum(0.1))

    def test_mlp_adam(self):
        self.run_both(_daemon.endpoint, "mlp", adam(1e-2))

    def test_transformer_sgd_momentum(self):
        self.run_both(_daemon.endpoint, "transformer", sgd_momentum(0.1))

    def test_transformer_adam(self):
        # The attention's key bias has an identically zero gradient (softmax ignores a constant shift), so
        # its computed gradient is rounding noise that Adam with a tiny eps would scale up to full steps;
        # eps=1e-4 keeps the comparison about Tandem, not about noise (float32 and float64 PyTorch differ by
        # 5e-6 with it, by 6e-2 without).
        self.run_both(_daemon.endpoint, "transformer", adam(1e-2, eps=1e-4))

    def test_transformer_with_its_transposes_written_as_permutes(self):
        """torch >= 2.1's core decompositions write every `t` as permute(dims=[1, 0]), which the daemon folds
        into the matrix products (compiler/fold_transposes.h). Under torch 1.13 the capture keeps `t`: here each
        2-D one is rewritten as that permute before registration, and the job still trains as PyTorch does."""
        from tandem.torch.lower import attr_value
        original = tandem.torch.capture_training_job
        rewritten = []

        def capture(*args, **kwargs):
            capture, lowered = original(*args, **kwargs)
            for node in lowered.graph["nodes"]:
                declared = node.get("declared_outputs", [])
                if node["op"] in ("t", "t_copy") and declared and len(declared[0]["shape"]) == 2:
                    node["op"] = "permute"
                    node["attrs"] = {"dims": attr_value([1, 0], "dims")}
                    rewritten.append(node["outputs"][0])
            return capture, lowered

        with mock.patch.object(tandem.torch, "capture_training_job", capture):
            self.run_both(_daemon.endpoint, "transformer", adam(1e-2, eps=1e-4))
        self.assertGreaterEqual(len(rewritten), 10)

        # Folded, the permutes plan as the transposes do (unfolded, each would be a tensor of its own).
        def peak(patched):
            torch.manual_seed(0)
            model, loss_fn, make_batch = models.tiny("transformer")
            with mock.patch.object(tandem.torch, "capture_training_job", capture if patched else original):
                job = tandem.torch.train(model, loss_fn, torch.optim.Adam(model.parameters(), lr=1e-2),
                                         make_batch(torch.Generator().manual_seed(1)), endpoint=_daemon.endpoint,
                                         name=f"peak{int(patched)}")
            with job:
                return int(job.registration["ephemeral_peak_bytes"])

        self.assertEqual(peak(True), peak(False))

    def test_lstm_sgd_momentum(self):
        self.run_both(_daemon.endpoint, "lstm", sgd_momentum(0.1))

    def test_lstm_adam(self):
        self.run_both(_daemon.endpoint, "lstm", adam(1e-2))

    def test_vgg19_sgd_momentum(self):
        self.run_both(_daemon.endpoint, "vgg19", sgd_momentum(0.05))

    def test_vgg19_adam(self):
        self.run_both(_daemon.endpoint, "vgg19", adam(1e-3))

    def test_resnet50_sgd_momentum(self):
        self.run_both(_daemon.endpoint, "resnet50", sgd_momentum(0.01))

    def test_resnet50_adam(self):
        # Batch norm makes the gradients of the biases that feed the residual sums nearly cancel; as for the
        # transformer, a larger eps keeps Adam from scaling rounding noise up to full steps.
        self.run_both(_daemon.endpoint, "resnet50", adam(1e-3, eps=1e-3))


if __name__ == "__main__":
    unittest.main()
