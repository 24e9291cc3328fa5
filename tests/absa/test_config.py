"""Pipeline config: the seeds' YAML shapes, shipped ablations, errors naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from moot.absa import SHIPPED_CONFIGS, AbsaConfig, ablations, load_config
from moot.errors import ConfigError
from seed_configs import SEED_003_COMBINED


def test_defaults_are_seed_001() -> None:
    cfg = load_config()
    assert cfg.enable_debate and cfg.enable_debate_override and cfg.mode == "persona"
    assert (cfg.rounds, cfg.order, cfg.preset) == (2, ["analyst", "critic", "empath"], "panel")
    t = cfg.thresholds()
    assert (t.min_total, t.min_margin, t.min_target_conf) == (1.6, 0.8, 0.7)
    m = cfg.moderator
    assert (m.drop_guard, m.span_iou, m.tie_margin, m.debate_low_conf) == (0.2, 0.8, 0.1, 0.55)
    assert AbsaConfig().rounds == 2


def test_shipped_ablations() -> None:
    assert set(SHIPPED_CONFIGS) >= {"default", "abl_no_debate", "abl_no_debate_override"}
    no_debate = load_config("abl_no_debate")
    assert (no_debate.enable_debate, no_debate.enable_debate_override, no_debate.name) == (
        False,
        False,
        "abl_no_debate",
    )
    no_override = load_config("abl_no_debate_override")
    assert (no_override.enable_debate, no_override.enable_debate_override) == (True, False)


def test_patch_mode_defaults() -> None:
    cfg = load_config({"mode": "patch"})
    assert (cfg.rounds, cfg.order, cfg.preset) == (1, ["epm", "tan", "cj"], "patch")


def test_seed_003_shape(tmp_path: Path) -> None:
    p = tmp_path / "cond.yaml"
    p.write_text(SEED_003_COMBINED, encoding="utf-8")
    cfg = load_config(p)
    assert cfg.name == "cond" and cfg.mode == "patch" and cfg.debate_on
    assert cfg.rounds == 1  # max_rounds is meta only, as in the seed
    proto = cfg.protocol()
    assert (proto.name, proto.rounds, proto.speakers()) == ("patch", 1, ["epm", "tan", "cj"])
    assert proto.personas["epm"].stance is None and proto.personas["epm"].role == "Evidence–Polarity Mapper"


def test_seed_003_block_without_mode_is_patch_mode() -> None:
    block = {"order": ["epm", "tan", "cj"], "personas": {"cj": {"name": "CJ", "stance": ""}}}
    cfg = load_config({"pipeline": {"debate": block}})
    assert (cfg.mode, cfg.preset, cfg.protocol().turn_output) == ("patch", "patch", "patch")
    assert load_config({"debate": {"max_rounds": 3}, "mode": "patch"}).rounds == 1


def test_mode_contradicting_personas_is_an_error() -> None:
    with pytest.raises(ConfigError) as err:
        load_config({"mode": "persona", "pipeline": {"debate": {"order": ["epm", "tan", "cj"]}}})
    assert err.value.key == "mode" and "'persona'" in str(err.value) and "'patch'" in str(err.value)


def test_seed_001_flat_shape() -> None:
    cfg = load_config(
        {
            "enable_debate": True,
            "enable_debate_override": False,
            "debate": {
                "rounds": 3,
                "order": ["critic", "empath"],
                "personas": {"critic": {"style": "blunt"}},
            },
            "debate_override": {"min_total": 2.0, "min_margin": 1.0, "min_target_conf": 0.8},
        }
    )
    assert (cfg.rounds, cfg.order) == (3, ["critic", "empath"])
    assert cfg.thresholds().min_total == 2.0
    assert cfg.protocol().personas["critic"].style == "blunt" and cfg.mode == "persona"


def test_debate_enabled_false_wins() -> None:
    assert not load_config({"pipeline": {"debate": {"enabled": False}}}).debate_on


def test_thresholds_from_json_path(tmp_path: Path) -> None:
    p = tmp_path / "th.json"
    p.write_text('{"min_total": 1.0, "min_margin": 0.5, "min_target_conf": 0.6}')
    assert load_config({"debate_override": str(p)}).thresholds().min_margin == 0.5


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"enable_debat": True}, "enable_debat"),
        ({"debate": {"roundz": 2}}, "debate.roundz"),
        ({"pipeline": {"debate": {"rounds": 1, "speakers": []}}}, "debate.speakers"),
        ({"debate_override": {"min_total": 1, "margin": 1}}, "debate_override.margin"),
        ({"moderator": {"iou": 0.5}}, "moderator.iou"),
        ({"mode": "duel"}, "mode"),
        ({"debate": {"rounds": 0}}, "debate.rounds"),
    ],
)
def test_errors_name_the_key(data: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(data)
    assert err.value.key == key
    assert key in str(err.value)


def test_bad_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such ABSA config"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1,")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_config(bad)
    both = tmp_path / "both.yaml"
    both.write_text("mode: patch\npipeline: {mode: persona}\n")
    with pytest.raises(ConfigError) as err:
        load_config(both)
    assert err.value.key == "mode"


def test_ablations_keep_other_settings() -> None:
    cfg = load_config({"name": "full", "mode": "patch", "max_tokens": 128})
    table = ablations(cfg)
    assert list(table) == ["full", "abl_no_debate_override", "abl_no_debate"]
    assert all(c.mode == "patch" and c.max_tokens == 128 for c in table.values())
    assert (table["abl_no_debate"].enable_debate, table["abl_no_debate"].enable_debate_override) == (
        False,
        False,
    )
    assert (
        table["abl_no_debate_override"].enable_debate,
        table["abl_no_debate_override"].enable_debate_override,
    ) == (True, False)
