"""Losses (functional and modules) against PyTorch: values and gradients for every option, with
gradcheck and second derivatives in float64, and the errors for bad input."""
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import minigrad as mg
import minigrad.nn.functional as F

from ops_oracle import check_vjp_derivatives, compare_with_torch, leaves, rng

REDUCTIONS = ["mean", "sum", "none"]
LOGITS = rng(3).standard_normal((6, 4)) * 2
TARGET = np.array([0, 3, 1, 1, 2, 3])
WEIGHT = np.array([0.5, 2.0, 1.0, 0.25])
LOGITS_ND = rng(4).standard_normal((3, 4, 2, 5))
TARGET_ND = rng(5).integers(0, 4, (3, 2, 5))
PROBS = rng(6).dirichlet(np.ones(4), size=6)


def _ce_case(target, weight=None, **kw):
    """(minigrad fn, torch fn) of the logits for a fixed target and options."""
    def ours(x):
        return F.cross_entropy(x, target, None if weight is None else mg.tensor(weight), **kw)

    def theirs(x):
        return TF.cross_entropy(x, torch.tensor(target),
                                None if weight is None else torch.tensor(weight), **kw)
    return ours, theirs


CE_CASES = {
    "index": (LOGITS, TARGET, {}),
    "weighted": (LOGITS, TARGET, {"weight": WEIGHT}),
    "ignored_default": (LOGITS, np.where(TARGET == 1, -100, TARGET), {}),
    "ignored_custom_weighted": (LOGITS, TARGET, {"ignore_index": 3, "weight": WEIGHT}),
    "smoothing": (LOGITS, TARGET, {"label_smoothing": 0.2}),
    "smoothing_weighted_ignored": (LOGITS, np.where(TARGET == 0, -100, TARGET),
                                   {"label_smoothing": 0.3, "weight": WEIGHT}),
    "spatial": (LOGITS_ND, TARGET_ND, {}),
    "spatial_weighted_smoothing": (LOGITS_ND, TARGET_ND, {"weight": WEIGHT,
                                                          "label_smoothing": 0.1}),
    "unbatched": (LOGITS[0], np.array(2), {}),
    "probabilities": (LOGITS, PROBS, {}),
    "probabilities_weighted_smoothing": (LOGITS, PROBS, {"weight": WEIGHT,
                                                         "label_smoothing": 0.25}),
}


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("case", sorted(CE_CASES))
def test_cross_entropy_matches_torch(case, reduction):
    logits, target, kw = CE_CASES[case]
    ours, theirs = _ce_case(target, reduction=reduction, **kw)
    compare_with_torch(ours, theirs, [logits])


def test_cross_entropy_probability_targets_get_gradients_too():
    compare_with_torch(lambda x, p: F.cross_entropy(x, p, label_smoothing=0.1),
                       lambda x, p: TF.cross_entropy(x, p, label_smoothing=0.1), [LOGITS, PROBS])


@pytest.mark.parametrize("case", ["weighted", "smoothing_weighted_ignored", "spatial",
                                  "probabilities_weighted_smoothing"])
def test_cross_entropy_gradcheck_and_second_derivatives(case):
    logits, target, kw = CE_CASES[case]
    ours, _ = _ce_case(target, **kw)
    assert mg.gradcheck(ours, leaves(logits))
    check_vjp_derivatives(ours, [logits])


def test_cross_entropy_in_float32_keeps_float32_and_module_form():
    logits = mg.tensor(LOGITS.astype(np.float32), requires_grad=True)
    loss = mg.nn.CrossEntropyLoss(weight=mg.tensor(WEIGHT.astype(np.float32)),
                                  label_smoothing=0.1)(logits, TARGET)
    loss.backward()
    assert loss.dtype == np.float32 and logits.grad.dtype == np.float32
    expected = torch.nn.CrossEntropyLoss(weight=torch.tensor(WEIGHT, dtype=torch.float32),
                                         label_smoothing=0.1)(
        torch.tensor(LOGITS, dtype=torch.float32), torch.tensor(TARGET))
    np.testing.assert_allclose(loss.item(), expected.item(), rtol=1e-6)


def test_every_target_ignored_gives_nan_like_torch():
    target = np.full(6, -100)
    with np.errstate(invalid="ignore"):
        ours = F.cross_entropy(mg.tensor(LOGITS), target).item()
    assert np.isnan(ours) and np.isnan(TF.cross_entropy(torch.tensor(LOGITS),
                                                        torch.tensor(target)).item())


NLL_CASES = {   # name -> (weight, ignore_index)
    "plain": (None, -100), "weighted": (WEIGHT, -100), "ignored_weighted": (WEIGHT, 1),
}


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("case", sorted(NLL_CASES))
def test_nll_loss_matches_torch(case, reduction):
    weight, ignore = NLL_CASES[case]
    compare_with_torch(
        lambda x: F.nll_loss(x, TARGET, None if weight is None else mg.tensor(weight),
                             ignore_index=ignore, reduction=reduction),
        lambda x: TF.nll_loss(x, torch.tensor(TARGET),
                              None if weight is None else torch.tensor(weight),
                              ignore_index=ignore, reduction=reduction),
        [np.log(PROBS)])


def test_nll_loss_spatial_gradcheck_and_module():
    log_probs = np.ascontiguousarray(   # torch's NLLLoss2d backward wants a contiguous input
        np.log(rng(7).dirichlet(np.ones(4), size=(3, 2, 5))).transpose(0, 3, 1, 2))
    compare_with_torch(lambda x: mg.nn.NLLLoss()(x, TARGET_ND),
                       lambda x: torch.nn.NLLLoss()(x, torch.tensor(TARGET_ND)), [log_probs])
    assert mg.gradcheck(lambda x: F.nll_loss(x, TARGET_ND), leaves(log_probs))


X = rng(8).standard_normal((4, 5))
Y = rng(9).standard_normal((4, 5))
REGRESSION = {   # name -> (loss name, keyword options)
    "mse": ("mse_loss", {}), "l1": ("l1_loss", {}), "smooth_l1": ("smooth_l1_loss", {}),
    "smooth_l1_beta": ("smooth_l1_loss", {"beta": 0.4}),
    "smooth_l1_beta0": ("smooth_l1_loss", {"beta": 0.0}),
    "huber": ("huber_loss", {}), "huber_delta": ("huber_loss", {"delta": 0.3}),
    "bce_logits": ("binary_cross_entropy_with_logits", {}),
}


def _regression(name, reduction):
    loss, kw = REGRESSION[name]
    return (lambda x, y: getattr(F, loss)(x, y, reduction=reduction, **kw),
            lambda x, y: getattr(TF, loss)(x, y, reduction=reduction, **kw))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name", sorted(REGRESSION))
def test_regression_losses_match_torch_in_both_inputs(name, reduction):
    ours, theirs = _regression(name, reduction)
    target = (Y > 0).astype(float) * 0.8 + 0.1 if name == "bce_logits" else Y
    compare_with_torch(ours, theirs, [X * 3, target])


@pytest.mark.parametrize("name", sorted(REGRESSION))
def test_regression_losses_gradcheck_and_second_derivatives(name):
    x, y = X * 3, Y + 0.05   # away from the kinks at x == y and |x - y| == beta
    assert mg.gradcheck(_regression(name, "mean")[0], leaves(x, y))
    check_vjp_derivatives(_regression(name, "sum")[0], [x, y])


def test_bce_with_logits_weights_and_pos_weight_and_extreme_logits():
    x = np.array([[-1e3, -30.0, 0.0], [30.0, 1e3, 2.0]])
    t = np.array([[0.0, 1.0, 0.5], [1.0, 0.0, 1.0]])
    w, pw = np.array([1.0, 0.5, 2.0]), np.array([3.0, 0.5, 1.5])
    compare_with_torch(
        lambda a, b: F.binary_cross_entropy_with_logits(a, b, mg.tensor(w),
                                                        pos_weight=mg.tensor(pw)),
        lambda a, b: TF.binary_cross_entropy_with_logits(a, b, torch.tensor(w),
                                                         pos_weight=torch.tensor(pw)), [x, t])
    compare_with_torch(lambda a: mg.nn.BCEWithLogitsLoss(pos_weight=mg.tensor(pw))(a, t),
                       lambda a: torch.nn.BCEWithLogitsLoss(pos_weight=torch.tensor(pw))(
                           a, torch.tensor(t)), [x])


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_binary_cross_entropy_matches_torch_with_weights(reduction):
    p = rng(10).uniform(0.05, 0.95, (4, 3))
    t = rng(11).uniform(0, 1, (4, 3))
    w = rng(12).uniform(0.5, 2, (3,))
    compare_with_torch(lambda a, b: F.binary_cross_entropy(a, b, mg.tensor(w),
                                                            reduction=reduction),
                       lambda a, b: TF.binary_cross_entropy(a, b, torch.tensor(w),
                                                            reduction=reduction), [p, t])
    assert mg.gradcheck(lambda a, b: F.binary_cross_entropy(a, b), leaves(p, t))
    check_vjp_derivatives(lambda a, b: F.binary_cross_entropy(a, b, reduction="sum"), [p, t])


def test_binary_cross_entropy_at_zero_and_one_is_finite_like_torch():
    p, t = np.array([0.0, 1.0, 0.0, 1.0, 0.5]), np.array([0.0, 1.0, 1.0, 0.0, 1.0])
    compare_with_torch(lambda a: mg.nn.BCELoss(reduction="none")(a, t),
                       lambda a: torch.nn.BCELoss(reduction="none")(a, torch.tensor(t)), [p])


@pytest.mark.filterwarnings("ignore:reduction. 'mean' divides:UserWarning")   # torch's, for "mean"
@pytest.mark.parametrize("reduction", REDUCTIONS + ["batchmean"])
@pytest.mark.parametrize("log_target", [False, True])
def test_kl_div_matches_torch(reduction, log_target):
    log_q = np.log(rng(13).dirichlet(np.ones(5), size=4))
    p = rng(14).dirichlet(np.ones(5), size=4)
    p[0, 1] = 0.0   # 0 log 0 = 0
    target = np.log(p + 1e-3) if log_target else p
    compare_with_torch(lambda a, b: F.kl_div(a, b, reduction=reduction, log_target=log_target),
                       lambda a, b: TF.kl_div(a, b, reduction=reduction, log_target=log_target),
                       [log_q, target], grads=[True, log_target])
    module = mg.nn.KLDivLoss(reduction, log_target)
    expected = torch.nn.KLDivLoss(reduction=reduction, log_target=log_target)(
        torch.tensor(log_q), torch.tensor(target))
    np.testing.assert_allclose(module(mg.tensor(log_q), mg.tensor(target)).numpy(),
                               expected.numpy(), atol=1e-12)


MODULES = [(mg.nn.MSELoss("sum"), torch.nn.MSELoss(reduction="sum")),
           (mg.nn.L1Loss(), torch.nn.L1Loss()),
           (mg.nn.SmoothL1Loss(beta=0.5), torch.nn.SmoothL1Loss(beta=0.5)),
           (mg.nn.HuberLoss(delta=2.0), torch.nn.HuberLoss(delta=2.0))]


@pytest.mark.parametrize("pair", MODULES, ids=lambda p: type(p[0]).__name__)
def test_regression_modules_match_torch(pair):
    ours, theirs = pair
    compare_with_torch(ours, theirs, [X * 2, Y])
    assert repr(ours).startswith(type(theirs).__name__)


def test_loss_weights_are_buffers_in_the_state_dict_like_torch():
    ours = mg.nn.CrossEntropyLoss(weight=mg.tensor(WEIGHT))
    theirs = torch.nn.CrossEntropyLoss(weight=torch.tensor(WEIGHT))
    assert list(ours.state_dict()) == list(theirs.state_dict()) == ["weight"]
    assert list(mg.nn.BCEWithLogitsLoss(pos_weight=mg.ones(2)).state_dict()) == ["pos_weight"]
    assert list(mg.nn.MSELoss().state_dict()) == []


def test_loss_errors_name_the_op_and_what_was_expected():
    logits = mg.tensor(LOGITS)
    with pytest.raises(ValueError, match=r"cross_entropy: target holds class index 4, outside "
                                         r"\[0, 4\) for input of shape \(6, 4\)"):
        F.cross_entropy(logits, [0, 4, 1, 1, 2, 0])
    with pytest.raises(ValueError, match=r"cross_entropy: target of shape \(5,\) does not fit "
                                         r"input of shape \(6, 4\): expected \(6,\)"):
        F.cross_entropy(logits, [0, 1, 1, 2, 0])
    with pytest.raises(ValueError, match=r"probability targets must have the input's shape"):
        F.cross_entropy(logits, mg.zeros(6, 3))
    with pytest.raises(ValueError, match=r"cross_entropy: weight must have one entry per class, "
                                         r"shape \(4,\), got \(3,\)"):
        F.cross_entropy(logits, TARGET, weight=mg.ones(3))
    with pytest.raises(ValueError, match="cross_entropy: label_smoothing must be between 0 and 1"):
        F.cross_entropy(logits, TARGET, label_smoothing=1.5)
    with pytest.raises(ValueError, match="nll_loss: reduction must be one of"):
        F.nll_loss(logits, TARGET, reduction="max")
    with pytest.raises(ValueError, match=r"mse_loss: target of shape \(4,\) does not match input "
                                         r"of shape \(4, 1\)"):
        F.mse_loss(mg.zeros(4, 1), mg.zeros(4))
    with pytest.raises(ValueError, match="binary_cross_entropy: all elements of input must be "
                                         "between 0 and 1"):
        F.binary_cross_entropy(mg.tensor([1.5]), mg.tensor([1.0]))
    with pytest.raises(ValueError, match="smooth_l1_loss: beta must be >= 0"):
        F.smooth_l1_loss(mg.zeros(2), mg.zeros(2), beta=-1.0)
    with pytest.raises(ValueError, match=r"cross_entropy: input must have a class axis"):
        F.cross_entropy(mg.tensor(1.0), 0)
