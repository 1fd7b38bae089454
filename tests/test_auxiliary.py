"""Auxiliary outputs: noted where backends legitimately differ, caught where a promise breaks."""
import torch

from mpsprobe.engine import auxiliary as A


def _bn(x, training):
    c = x.shape[1]
    w, b = torch.ones(c), torch.zeros(c)
    rm, rv = torch.zeros(c), torch.ones(c)
    return torch.ops.aten.native_batch_norm(x, w, b, rm, rv, training, 0.1, 1e-5)


def test_eval_batch_norm_empty_cpu_stats_against_full_target_stats_is_a_note():
    x = torch.randn(4, 2048, 3, 3)
    out, save_mean, save_invstd = _bn(x, training=False)
    assert save_mean.shape == (0,) and save_invstd.shape == (0,)  # what the CPU really returns
    # A CUDA-like target: (C,)-shaped saved statistics in eval mode.
    target = (out.clone(), torch.zeros(2048), torch.ones(2048))
    rules = A.auxiliary_outputs("native_batch_norm")
    assert set(rules) == {1, 2}
    for i, rule in rules.items():
        ok, note = A.compare_auxiliary(rule, (out, save_mean, save_invstd)[i], target[i])
        assert ok, note
        assert "computed on one side only" in note and "(2048,)" in note and "(0,)" in note
    # The same through the aten spelling the recorder uses.
    assert A.auxiliary_outputs("aten::native_batch_norm") == rules
    assert A.auxiliary_outputs("aten._native_batch_norm_legit.no_stats") == A.auxiliary_outputs(
        "_native_batch_norm_legit")


def test_training_batch_norm_stats_are_checked_for_what_backward_consumes():
    x = torch.randn(8, 16, 5, 5)
    _, mean, invstd = _bn(x, training=True)
    rule = A.auxiliary_outputs("native_batch_norm")[1]
    assert A.compare_auxiliary(rule, mean, mean.clone())[0]
    ok, note = A.compare_auxiliary(rule, mean, mean + 1.0)
    assert not ok and "values differ" in note
    ok, note = A.compare_auxiliary(rule, mean, mean[:8])
    assert not ok and "shape differs" in note


def test_layer_norm_float32_stats_for_bfloat16_input_are_dtype_free():
    x = torch.randn(2, 3, 64).to(torch.bfloat16)
    out, mean, rstd = torch.ops.aten.native_layer_norm(x, [64], None, None, 1e-5)
    assert mean.dtype == torch.bfloat16 and mean.shape == (2, 3, 1)  # the CPU keeps the input's dtype
    # A CUDA-like target keeps the statistics in float32.
    _, mean32, rstd32 = torch.ops.aten.native_layer_norm(x.float(), [64], None, None, 1e-5)
    rules = A.auxiliary_outputs("native_layer_norm")
    for i, cpu, target in ((1, mean, mean32), (2, rstd, rstd32)):
        ok, note = A.compare_auxiliary(rules[i], cpu, target)
        assert ok, note
        assert "dtype differs" in note
    assert not A.compare_auxiliary(rules[2], rstd, rstd32 * 2)[0]
    assert not A.compare_auxiliary(rules[1], mean, mean32.view(2, 3))[0]
    # nn.functional.layer_norm returns the primary output only.
    assert A.auxiliary_outputs("nn.functional.layer_norm") == {}


def test_ignored_and_shape_only_outputs():
    x = torch.randn(4, 3, 5)
    outs = torch.ops.aten._batch_norm_with_update(x, None, None, torch.zeros(3), torch.ones(3), 0.1, 1e-5)
    reserve_rule = A.auxiliary_outputs("_batch_norm_with_update")[3]
    assert outs[3].numel() == 0
    ok, note = A.compare_auxiliary(reserve_rule, outs[3], torch.empty(1024, dtype=torch.uint8))
    assert ok and "not compared" in note
    workspace = A.auxiliary_outputs("_thnn_fused_lstm_cell")[2]
    assert A.compare_auxiliary(workspace, torch.zeros(2, 8), torch.ones(2, 8))[0]
    assert not A.compare_auxiliary(workspace, torch.zeros(2, 8), torch.ones(2, 4))[0]


def test_lstsq_driver_dependent_outputs():
    a, b = torch.randn(6, 3, dtype=torch.float64), torch.randn(6, 2, dtype=torch.float64)
    cpu = torch.linalg.lstsq(a, b)                    # gelsy: no residuals, no singular values
    target = torch.linalg.lstsq(a, b, driver="gelsd")  # another driver computes them
    rules = A.auxiliary_outputs("linalg.lstsq")
    assert cpu.residuals.numel() == 0 and target.residuals.numel() > 0
    for i in (1, 3):
        assert A.compare_auxiliary(rules[i], cpu[i], target[i])[0]
    assert A.compare_auxiliary(rules[2], cpu.rank, target.rank) == (True, "rank (auxiliary): values agree")
    assert not A.compare_auxiliary(rules[2], cpu.rank, target.rank - 1)[0]


def test_table_matches_the_schemas_it_cites():
    for name, rules in A.AUXILIARY.items():
        op = getattr(torch.ops.aten, name)
        schema = getattr(op, "default", None) or getattr(op, op.overloads()[0])
        returns = len(schema._schema.returns)
        for index, rule in rules.items():
            assert 0 < index < returns, (name, index)  # output 0 is always primary
            assert rule.how in A.HOW and rule.promise and rule.source
    for opinfo, aten in A.OPINFO_ATEN.items():
        assert aten is None or aten in A.AUXILIARY
