"""A bfloat16 LSTM language model (embedding -> 2-layer LSTM -> linear decoder -> log_softmax/nll, SGD with
momentum) trained through a CPU tandemd, on both ways an nn.LSTM is captured:

- per-step cell math (PyTorch before 2.4, e.g. 1.13; later ones trace their CPU LSTM's forward to
  mkldnn_rnn_layer without fusion, and that test skips): each step's mm/addmm, sigmoid, tanh, mul, add, slicing,
  stack and cat, and their backwards, all in bfloat16;
- the fused tandem::lstm / tandem::lstm_backward per layer (PyTorch >= 2.4): every input and output of the
  layer, its saved gates and cell states included, in bfloat16.

Eight steps on one batch give PyTorch's bfloat16 eager losses within bfloat16 tolerance, and weights within
it after training. Not bit for bit: eager PyTorch rounds after every op (and fuses SGD's update into one
rounding), Tandem rounds where each of its ops stores; both round every tensor to bfloat16 (unit roundoff
u = 2^-8), so a 5u relative bound per loss (as test_half_precision's) allows for the drift.

Independently of the PyTorch version, a hand-built graph of one lstm and lstm_backward node runs through the
daemon in bfloat16 and in float16 and is compared with the float64 math of rnn_reference.py on the same
16-bit values, and in bfloat16 with nn.LSTM itself (eager, autograd). (A float16 model cannot be traced on the
CPU under PyTorch 1.13, whose CPU addmm has no float16 kernel, nor run there in eager mode for a reference.)
"""

import copy
import unittest

import common  # noqa: F401  (paths)
from common import (ModuleDaemon, assert_losses_close, eager_losses, fused_rnn_setting, models, relative_error,
                    run_graph, tandem, torch)

import torch.nn as nn

from tandem import client as tandem_client
from tandem.torch import fused_rnn, rnn_reference

RTOL_BF16 = 5 * 2.0 ** -8
FUSION_API = fused_rnn._API
NEEDS_FUSION = f"needs PyTorch >= 2.4 for the fused tandem::lstm op; this is PyTorch {torch.__version__}"
CELL_OPS = {"sigmoid", "tanh", "sigmoid_backward", "tanh_backward"}
FUSED_OPS = {"lstm", "lstm_backward"}

_daemon = ModuleDaemon()
setUpModule, tearDownModule = _daemon.start, _daemon.stop


def _language_model():
    """The reference language model, small and in bfloat16 (no dropout, so eager PyTorch is comparable)."""
    torch.manual_seed(0)
    model, loss_fn, make_batch = models.lstm_lm(vocab=24, embed=10, hidden=12, layers=2, dropout=0.0, seq=5,
                                                batch=4)
    return model.to(torch.bfloat16), loss_fn, make_batch(torch.Generator().manual_seed(1))


def _optimizer(params):
    return torch.optim.SGD(params, lr=0.5, momentum=0.9)


class LanguageModelTrainingMixin:
    """Captures and trains the bfloat16 language model with fusion set to `FUSION` around the capture."""

    FUSION = None
    STEPS = 8

    def capture(self):
        model, loss_fn, batch = _language_model()
        with fused_rnn_setting(self.FUSION):
            return tandem.torch.capture_training_job(model, loss_fn, _optimizer(model.parameters()), batch)

    def check_graph_is_bfloat16(self, lowered, expected_ops, absent_ops):
        feeds = {f["name"]: f["dtype"] for f in lowered.graph["feeds"]}
        self.assertEqual(feeds["batch/0"], "INT64")  # token ids
        for name, value in lowered.persistent:
            self.assertEqual(value.dtype, torch.bfloat16, name)
        nodes = lowered.graph["nodes"]
        ops = {n["op"] for n in nodes}
        self.assertTrue(expected_ops <= ops, f"{expected_ops - ops} missing from {sorted(ops)}")
        self.assertFalse(absent_ops & ops, sorted(ops))
        # Every output of the LSTM's ops is declared bfloat16.
        checked = 0
        for n in nodes:
            if n["op"] in expected_ops:
                for declared in n.get("declared_outputs", []):
                    self.assertEqual(declared["dtype"], "BFLOAT16", f"{n['op']} output {declared['name']}")
                    checked += 1
        self.assertGreater(checked, 0)
        return nodes

    def train_and_compare(self, name):
        model, loss_fn, batch = _language_model()
        reference = copy.deepcopy(model)
        with fused_rnn_setting(self.FUSION):
            job = tandem.torch.train(model, loss_fn, _optimizer(model.parameters()), batch,
                                     endpoint=_daemon.endpoint, name=name)
        with job:
            losses = [float(job.step(*batch)) for _ in range(self.STEPS)]
            trained = job.state_dict()
        ref_losses = eager_losses(reference, loss_fn, _optimizer(reference.parameters()), [batch] * self.STEPS)
        assert_losses_close(self, losses, ref_losses, RTOL_BF16)
        # Training moved the loss, in both (so the comparison is not of two constants).
        self.assertLess(ref_losses[-1], 0.95 * ref_losses[0])
        self.assertLess(losses[-1], 0.95 * losses[0])
        for key, value in reference.state_dict().items():
            self.assertEqual(trained[key].dtype, torch.bfloat16, key)
            self.assertFalse(torch.isnan(trained[key].float()).any().item(), key)
            diff = (trained[key].float() - value.float()).norm().item()
            self.assertLessEqual(diff, 4 * RTOL_BF16 * value.float().norm().item(), key)


class CellMathTest(LanguageModelTrainingMixin, unittest.TestCase):
    """The per-step capture (fusion off): sigmoid, tanh and their backwards in bfloat16."""

    FUSION = "0"

    def per_step_capture(self):
        """The fusion-off capture; skips where PyTorch keeps the LSTM's forward as mkldnn_rnn_layer (its CPU
        LSTM under 2.x), which Tandem does not cover (docs/ops.md "Not covered"): there the fused op is the way."""
        _, lowered = self.capture()
        if any(n["op"] == "mkldnn_rnn_layer" for n in lowered.graph["nodes"]):
            self.skipTest(f"PyTorch {torch.__version__} traces the LSTM's forward to mkldnn_rnn_layer without "
                          "fusion; FusedLayerTest covers this version")
        return lowered

    def test_capture_is_bfloat16_cell_math(self):
        nodes = self.check_graph_is_bfloat16(self.per_step_capture(), CELL_OPS, FUSED_OPS)
        ops = {n["op"] for n in nodes}
        # The rest of the cell math, also in bfloat16.
        self.assertTrue({"mul.Tensor", "add.Tensor", "stack", "cat"} <= ops, sorted(ops))

    def test_sgd_momentum_matches_pytorch_bfloat16(self):
        self.per_step_capture()
        self.train_and_compare("lstm-lm-bf16-cells")


@unittest.skipUnless(FUSION_API, NEEDS_FUSION)
class FusedLayerTest(LanguageModelTrainingMixin, unittest.TestCase):
    """The fused capture: one bfloat16 lstm and lstm_backward node per layer."""

    FUSION = None

    def test_capture_is_one_bfloat16_lstm_per_layer(self):
        _, lowered = self.capture()
        nodes = self.check_graph_is_bfloat16(lowered, FUSED_OPS, CELL_OPS)
        self.assertEqual(sum(n["op"] == "lstm" for n in nodes), 2)
        for n in nodes:
            if n["op"] == "lstm":
                self.assertEqual(n["declared_outputs"][3]["shape"], ["5", "4", "60"])  # saved [T, B, 5H], bfloat16

    def test_sgd_momentum_matches_pytorch_bfloat16(self):
        self.train_and_compare("lstm-lm-bf16-fused")


class FusedOpThroughDaemonTest(unittest.TestCase):
    """One 16-bit LSTM layer as a hand-built lstm + lstm_backward graph (any PyTorch version)."""

    STEPS, BATCH, INPUTS, HIDDEN = 6, 3, 7, 5
    FORWARD_IN = ["x", "h0", "c0", "w_ih", "w_hh", "b_ih", "b_hh"]
    FORWARD_OUT = ["y", "h_n", "c_n", "saved"]
    BACKWARD_OUT = ["grad_x", "grad_h0", "grad_c0", "grad_w_ih", "grad_w_hh", "grad_b", "grad_gates"]

    def feeds(self, dtype):
        g = torch.Generator().manual_seed(7)
        t, b, i, h = self.STEPS, self.BATCH, self.INPUTS, self.HIDDEN
        torch.manual_seed(3)
        lstm = nn.LSTM(i, h, 1)
        values = {
            "x": torch.randn(t, b, i, generator=g), "h0": torch.randn(b, h, generator=g) * 0.5,
            "c0": torch.randn(b, h, generator=g) * 0.5, "w_ih": lstm.weight_ih_l0, "w_hh": lstm.weight_hh_l0,
            "b_ih": lstm.bias_ih_l0, "b_hh": lstm.bias_hh_l0, "grad_y": torch.randn(t, b, h, generator=g),
            "grad_h_n": torch.randn(b, h, generator=g), "grad_c_n": torch.randn(b, h, generator=g),
        }
        return {n: v.detach().to(dtype) for n, v in values.items()}

    def run_layer(self, feeds, dtype_code):
        """The layer's forward and backward through the daemon: {output name: tensor}."""
        nodes = [{"op": "lstm", "inputs": self.FORWARD_IN, "outputs": self.FORWARD_OUT},
                 {"op": "lstm_backward",
                  "inputs": ["grad_y", "grad_h_n", "grad_c_n", "x", "h0", "c0", "w_ih", "w_hh", "y", "saved"],
                  "outputs": self.BACKWARD_OUT}]
        got, codes = run_graph(_daemon.endpoint, "lstm-layer-16bit", nodes, feeds,
                               self.FORWARD_OUT + self.BACKWARD_OUT)
        for n, t in got.items():
            self.assertEqual(codes[n], dtype_code, n)
            self.assertFalse(torch.isnan(t.float()).any().item(), n)
        return got

    def check_against_float64_math(self, got, feeds, rtol):
        f64 = {n: t.double() for n, t in feeds.items()}
        y, h_n, c_n, saved = rnn_reference.lstm_forward_reference(*[f64[n] for n in self.FORWARD_IN])
        expected = dict(zip(self.FORWARD_OUT, (y, h_n, c_n, saved)))
        grads = rnn_reference.lstm_backward_reference(f64["grad_y"], f64["grad_h_n"], f64["grad_c_n"], f64["x"],
                                                  f64["h0"], f64["c0"], f64["w_ih"], f64["w_hh"], y, saved)
        expected.update(zip(self.BACKWARD_OUT, grads))
        for n, e in expected.items():
            err = relative_error(got[n], e)
            bound = 2 * rtol if n.startswith("grad") else rtol
            self.assertLessEqual(err, bound, f"{n}: relative error {err:.3g} against the float64 math")

    def test_bfloat16_layer_matches_pytorch_and_the_float64_math(self):
        feeds = self.feeds(torch.bfloat16)
        got = self.run_layer(feeds, tandem_client.BFLOAT16)
        self.check_against_float64_math(got, feeds, RTOL_BF16)

        # PyTorch's own bfloat16 LSTM (eager, autograd) on the same values.
        module = nn.LSTM(self.INPUTS, self.HIDDEN, 1).to(torch.bfloat16)
        with torch.no_grad():
            for p, n in zip(module.parameters(), ["w_ih", "w_hh", "b_ih", "b_hh"]):
                p.copy_(feeds[n])
        x = feeds["x"].clone().requires_grad_()
        h0 = feeds["h0"].clone().unsqueeze(0).requires_grad_()
        c0 = feeds["c0"].clone().unsqueeze(0).requires_grad_()
        ref_y, (ref_h, ref_c) = module(x, (h0, c0))
        loss = ((ref_y.float() * feeds["grad_y"].float()).sum() + (ref_h[0].float() * feeds["grad_h_n"].float()).sum()
                + (ref_c[0].float() * feeds["grad_c_n"].float()).sum())
        ref_grads = torch.autograd.grad(loss, [x, h0, c0] + list(module.parameters()))
        # grad_b is both biases' gradient (PyTorch's two differ by its bfloat16 sums' order).
        pytorch = [("y", ref_y), ("h_n", ref_h[0]), ("c_n", ref_c[0]), ("grad_x", ref_grads[0]),
                   ("grad_h0", ref_grads[1][0]), ("grad_c0", ref_grads[2][0]), ("grad_w_ih", ref_grads[3]),
                   ("grad_w_hh", ref_grads[4]), ("grad_b", ref_grads[5]), ("grad_b", ref_grads[6])]
        for n, e in pytorch:
            err = relative_error(got[n], e.detach())
            bound = 2 * RTOL_BF16 if n.startswith("grad") else RTOL_BF16
            self.assertLessEqual(err, bound, f"{n}: relative error {err:.3g} against PyTorch's bfloat16 LSTM")

    def test_float16_layer_matches_the_float64_math(self):
        feeds = self.feeds(torch.float16)
        got = self.run_layer(feeds, tandem_client.FLOAT16)
        self.check_against_float64_math(got, feeds, 5 * 2.0 ** -11)


if __name__ == "__main__":
    unittest.main()
