"""Seed 003's own YAML configurations, shared by the tests that load or run them.

Kept as the seed writes them (quoted strings, empty stance/style) so every test
exercises the exact shape a seed user would hand to moot.
"""

from __future__ import annotations

# The override example of seed 003: the three patch personas, one round.
SEED_003_OVERRIDE = """
pipeline:
  debate:
    rounds: 1
    order: ["epm", "tan", "cj"]
    personas:
      epm:
        name: "EPM"
        role: "Evidence–Polarity Mapper"
        goal: "Determine polarity only when supported by explicit textual evidence"
        stance: ""
        style: ""
      tan:
        name: "TAN"
        role: "Target–Aspect Normalizer"
        goal: "Resolve null, duplicate, or misaligned aspect targets"
        stance: ""
        style: ""
      cj:
        name: "CJ"
        role: "Consistency Judge"
        goal: "Produce a single, consistent set of aspect–polarity tuples"
        stance: ""
        style: ""
"""

# The conditions file of seed 003: debate metadata (max_rounds, injection) only.
SEED_003_CONDITIONS = """
pipeline:
  debate:
    enabled: true
    max_rounds: 3
    injection:
      strategy: "during_debate_one_shot"
      trigger: "deadlock_obs2of4"
      allow_multiple_injections: false
"""

# Both in one debate block plus `mode: patch`, as a user merging the two files would write it.
SEED_003_COMBINED = SEED_003_CONDITIONS + SEED_003_OVERRIDE.split("  debate:\n", 1)[1] + "mode: patch\n"
