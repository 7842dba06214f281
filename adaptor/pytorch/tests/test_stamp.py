"""The optimizer's update traced once per group and copied per parameter (tandem/torch/stamp.py): the step it
makes computes exactly what the step traced parameter by parameter computes."""

import os
import unittest
from unittest import mock

import common  # noqa: F401  (paths)
from common import models, tandem, torch

import torch.nn as nn
from tandem.torch.optim import OptimizerPlan


def _capture(make_model, make_optimizer, stamped, **options):
    torch.manual_seed(0)
    model, loss_fn, make_batch = make_model()
    optimizer = make_optimizer(model)
    with mock.patch.dict(os.environ, {"TANDEM_STAMP_UPDATES": "1" if stamped else "0"}):
        capture, _ = tandem.torch.capture_training_job(model, loss_fn, optimizer, make_batch(torch.Generator()),
                                                       **options)
    return capture


def _stamped_nodes(capture):
    return [n for n in capture.gm.graph.nodes if n.op == "call_function" and n.name.startswith("update")]


def _traced_nodes(capture):
    return sum(1 for n in capture.gm.graph.nodes if n.op == "call_function")


class _ScalarGain(nn.Module):
    """A model with a rank-0 parameter, whose update is traced as before."""

    def __init__(self, body):
        super().__init__()
        self.body = body
        self.gain = nn.Parameter(torch.tensor(1.5))

    def forward(self, x):
        return self.body(x) * self.gain


def _scalar_gain():
    body, loss_fn, make_batch = models.tiny("mlp")
    return _ScalarGain(body), loss_fn, make_batch


def _two_groups(kind, **extra):
    """An optimizer of `kind` with the model's weights and biases in two groups of different hyper-parameters."""
    def make(model):
        weights = [p for n, p in model.named_parameters() if n.endswith("weight")]
        rest = [p for n, p in model.named_parameters() if not n.endswith("weight")]
        return kind([{"params": weights, "weight_decay": 0.01}, {"params": rest, "lr": 0.02}], lr=0.05, **extra)
    return make


class StampedUpdateTest(unittest.TestCase):
    def assertSameStep(self, make_model, make_optimizer, **options):
        """Stamped and traced captures give bit-identical outputs on the same inputs; returns the stamped one."""
        traced = _capture(make_model, make_optimizer, False, **options)
        stamped = _capture(make_model, make_optimizer, True, **options)
        self.assertEqual(_stamped_nodes(traced), [])
        self.assertEqual(_traced_nodes(stamped), _traced_nodes(traced))
        inputs = [t.clone() for t in traced.flat_inputs]
        expected = traced.gm(*[t.clone() for t in inputs])
        got = stamped.gm(*[t.clone() for t in inputs])
        self.assertEqual(len(got), len(expected))
        for i, (a, b) in enumerate(zip(got, expected)):
            self.assertEqual(a.dtype, b.dtype, f"output {i}")
            self.assertTrue(torch.equal(a, b), f"output {i} differs: {(a.double() - b.double()).abs().max()}")
        return stamped

    def test_every_optimizer_in_two_groups(self):
        mlp = lambda: models.tiny("mlp")  # noqa: E731
        cases = {
            "sgd momentum nesterov": _two_groups(torch.optim.SGD, momentum=0.9, nesterov=True),
            "sgd dampening": _two_groups(torch.optim.SGD, momentum=0.9, dampening=0.3),
            "sgd plain": _two_groups(torch.optim.SGD),
            "adam amsgrad": _two_groups(torch.optim.Adam, amsgrad=True),
            "adamw": _two_groups(torch.optim.AdamW),
            "rmsprop centered momentum": _two_groups(torch.optim.RMSprop, momentum=0.5, centered=True),
            "adagrad": _two_groups(torch.optim.Adagrad, lr_decay=0.1),
        }
        for name, make_optimizer in cases.items():
            with self.subTest(name):
                stamped = self.assertSameStep(mlp, make_optimizer)
                self.assertTrue(_stamped_nodes(stamped), "nothing was stamped")

    def test_loss_scaling_skips_inside_the_stamped_update(self):
        stamped = self.assertSameStep(lambda: models.tiny("mlp"),
                                      lambda m: torch.optim.Adam(m.parameters(), lr=1e-2),
                                      autocast=torch.bfloat16, grad_scaler=True)
        wheres = [n for n in _stamped_nodes(stamped) if "where" in str(n.target)]
        self.assertTrue(wheres, "the found-inf skip is not part of the stamped update")

    def test_a_rank0_parameter_is_traced(self):
        stamped = self.assertSameStep(_scalar_gain, lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9))
        # The body's 10 parameters are stamped (4 ops each: momentum * buf, + grad, lr * buf, p -), not the gain.
        self.assertEqual(len(_stamped_nodes(stamped)), 4 * 10)

    def test_an_update_that_reads_the_shape_is_traced(self):
        original = OptimizerPlan.update_one

        def reshaping(self, g, p, grad, states, s):
            return original(self, g, p, grad.reshape(p.shape), states, s)

        with mock.patch.object(OptimizerPlan, "update_one", reshaping):
            stamped = self.assertSameStep(lambda: models.tiny("mlp"),
                                          lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9))
        self.assertEqual(_stamped_nodes(stamped), [])


if __name__ == "__main__":
    unittest.main()
