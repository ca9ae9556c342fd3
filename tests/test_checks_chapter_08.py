"""The check of chapter 8's new coding exercise, the HMM's baseline without transport: the reference
passes, each named mistake fails with its own words, and a function that raises or returns nothing gets
a readable verdict, never a traceback."""

import numpy as np
import pytest
import torch

from bayesattn_lite import checks, converged, diagnostics, wind_tunnels
from checking import failed


def no_transport(emission, observations):
    likelihood = emission[:, observations].T          # (K, S): E[s, o_t] for every step and state
    return likelihood / likelihood.sum(axis=1, keepdims=True)


def carried(emission, observations):                 # a filter whose state never moves: it remembers
    belief, out = np.ones(emission.shape[0]), []
    for o in observations:
        belief = belief * emission[:, o]
        belief = belief / belief.sum()
        out.append(belief)
    return np.array(out)


def test_the_reference_passes_and_is_the_tasks_baseline():
    assert checks.check_no_transport(no_transport)
    assert checks.check_no_transport(lambda e, o: torch.as_tensor(no_transport(e, o)))  # a tensor is fine too
    task = wind_tunnels.wind_tunnel("hmm")
    batch = task.sample(16, seed=3)
    S, O, start = task.S, task.O, task.prefix_len
    E = (batch.tokens[:, S * S:start].double() * task.resolution).view(-1, S, O).numpy()
    obs = (batch.tokens[:, start:] - task.n_levels).numpy()
    mine = np.stack([no_transport(E[b], obs[b]) for b in range(len(batch))])
    assert np.allclose(mine, task.baseline_posterior(batch)[:, start:].double().numpy(), atol=1e-6)
    full = torch.zeros(batch.posterior.shape, dtype=torch.float64)
    full[:, start:] = torch.from_numpy(mine)
    kl = diagnostics.kl_bits(torch.log(full.clamp_min(1e-300)), batch).item()
    assert np.isclose(kl, converged.baseline_kl(task, batch), atol=1e-5)


@pytest.mark.parametrize("fn, phrases", [
    (carried, ["carries over", "transport"]),
    (lambda e, o: e[:, o].T, ["do not sum to 1", "over the states"]),
    (lambda e, o: e[:, o].T / e[:, o].T.sum(axis=0), ["wrong axis", "each row"]),
    (lambda e, o: np.ones((len(o), e.shape[0])) / e.shape[0], ["Compare with", "forward_filter"]),
    (lambda e, o: no_transport(e, o).T, ["expected shape"]),
])
def test_each_mistake_is_named(fn, phrases):
    failed(checks.check_no_transport(fn), *phrases)


@pytest.mark.parametrize("fn, phrases", [
    (lambda e, o: 1 / 0, ["raised ZeroDivisionError"]),
    (lambda e, o: e[o], ["raised IndexError"]),          # rows of E are states, not observations
    (lambda e, o: None, ["does the function end with return?"]),
    (lambda e: e, ["raised TypeError"]),
])
def test_a_broken_function_gets_a_readable_verdict(fn, phrases):
    failed(checks.check_no_transport(fn), *phrases)


def test_the_check_is_exported():
    assert "check_no_transport" in checks.__all__


def test_an_unwritten_stub_answers_with_the_reference_so_later_cells_run(capsys):
    """The learner copy decorates the stub with until_written(check_no_transport)."""
    @checks.until_written(checks.check_no_transport)
    def my_no_transport(emission, observations):
        raise NotImplementedError("write my_no_transport: see the exercise above")

    E = np.array([[0.5, 0.5, 0.0], [0.1, 0.8, 0.1], [0.2, 0.2, 0.6]])
    o = np.array([0, 2, 1, 1])
    assert np.allclose(my_no_transport(E, o), no_transport(E, o))
    assert "not written yet" in capsys.readouterr().out
    failed(checks.check_no_transport(my_no_transport), "raised NotImplementedError")
