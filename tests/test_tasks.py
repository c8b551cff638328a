"""The trigger-conditional task: exact feature layout and targets (Ran-Milo 2026)."""

import pytest
import torch

from sinklab.core.errors import SinklabError
from sinklab.trigger.task import BOS, TRIGGER, TriggerTask


def test_feature_layout():
    task = TriggerTask(n=16, length=16)
    b = task.sample(500, torch.Generator().manual_seed(0))
    x, j = b.x, b.trigger
    assert x.shape == (500, 16, 16)
    torch.testing.assert_close(x[:, 0], torch.eye(16)[0].expand(500, 16))  # BOS is exactly e_0
    assert torch.all(x[:, 1:, BOS] == 0)
    rows = torch.arange(500)
    is_trigger = torch.zeros(500, 16, dtype=torch.bool)
    is_trigger[rows, j] = True
    assert torch.all(x[..., TRIGGER] == is_trigger.float())  # exactly one trigger, nowhere else
    content = torch.ones(500, 16, dtype=torch.bool)
    content[:, 0] = False
    content &= ~is_trigger
    assert torch.all(x[..., 15] == content.float())  # bias channel: 1 for content only
    noise = x[:, 1:, 2:15]
    assert noise.min() >= -1 and noise.max() < 1 and noise.abs().mean() > 0.4  # Uniform(-1, 1)
    assert torch.all(x[rows, j, 2:15] != 0)  # the trigger carries noise too
    assert set(j.tolist()) == set(range(2, 16))  # uniform over {2, ..., L-1}


def test_single_layer_targets_are_prefix_means_at_the_trigger_only():
    task = TriggerTask(n=6, length=8)
    b = task.sample(64, torch.Generator().manual_seed(1))
    for i in range(64):
        j = b.trigger[i].item()
        expected = torch.zeros(8, 6)
        expected[j] = b.x[i, 1 : j + 1].mean(0)
        torch.testing.assert_close(b.y[i], expected)


def test_residual_targets_add_the_mean_to_the_input():
    task = TriggerTask(n=6, length=8, residual=True)
    b = task.sample(16, torch.Generator().manual_seed(2))
    for i in range(16):
        j = b.trigger[i].item()
        expected = b.x[i].clone()
        expected[j] += b.x[i, 1 : j + 1].mean(0)
        torch.testing.assert_close(b.y[i], expected)


def test_fixed_trigger_and_reproducible_sampling():
    task = TriggerTask()
    b = task.sample(10, torch.Generator().manual_seed(3), trigger=7)
    assert torch.all(b.trigger == 7) and torch.all(b.x[:, 7, TRIGGER] == 1)
    again = task.sample(10, torch.Generator().manual_seed(3), trigger=7)
    torch.testing.assert_close(b.x, again.x)


def test_non_trigger_rows_exclude_row_zero_and_the_trigger():
    rows = TriggerTask(length=6, eval_trigger=3).non_trigger_rows(torch.tensor([2, 5]))
    assert rows.tolist() == [[False, True, False, True, True, True], [False, True, True, True, True, False]]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"n": 2}, "at least 3"),
        ({"length": 3}, "at least 4"),
        ({"length": 6, "eval_trigger": 7}, "outside the sequence"),
        ({"eval_trigger": 1}, "outside the sequence"),
    ],
)
def test_bad_task_parameters(kwargs, message):
    with pytest.raises(SinklabError, match=message):
        TriggerTask(**kwargs)
