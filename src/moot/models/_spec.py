"""The two ends of a model spec with options.

A spec may end in ``?key=value&key=value``: ``local:model.gguf?n_gpu_layers=20&n_threads=8``
or ``openai:llama3?base_url=http://gpu-box:8000/v1&api_key_env=GPU_BOX_KEY``. Each backend
reads the options it accepts with :func:`moot.models.base.split_spec_options`; here the
provider is split off (``local?n_threads=4`` included), and a persona's ``model`` written
as a YAML mapping, ``{spec: ..., base_url: ...}``, becomes the same one-line spec.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

__all__ = ["split_provider", "spec_from_mapping"]


def split_provider(spec: str) -> tuple[str, str]:
    """``"local:m.gguf?n_ctx=8192"`` -> ``("local", "m.gguf?n_ctx=8192")``.

    The query is set aside before looking for the colon, so ``local?n_threads=4`` (the
    bundled model with an option) is provider ``local``, and a ``base_url`` option's own
    colons do not count. Nothing is stripped: whitespace inside a spec is the backend's
    to refuse (``openai :m`` names no known provider).
    """
    head, sep, query = spec.partition("?")
    provider, _, rest = head.partition(":")
    return provider, rest + sep + query


def spec_from_mapping(value: Mapping[str, Any]) -> str:
    """``{"spec": "openai:m", "base_url": "http://h/v1"}`` -> ``"openai:m?base_url=http%3A..."``.

    A list value becomes a comma-separated one (``endpoints: [URL, URL]``, replicas).

    Raises:
        ValueError: no ``spec`` string, or a value that is not a scalar (pydantic turns
            this into a validation error naming the field).
    """
    spec = value.get("spec")
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError("a model mapping needs 'spec', e.g. {spec: 'openai:MODEL', base_url: ...}")
    options = {k: v for k, v in value.items() if k != "spec"}
    for key, option in options.items():
        if isinstance(option, list):  # endpoints: [url, url] -> "url,url"
            if not option or not all(isinstance(o, str | int | float) for o in option):
                raise ValueError(f"model option {key!r} must be a non-empty list of strings or numbers")
            options[key] = option = ",".join(str(o) for o in option)
        if not isinstance(option, str | int | float) or isinstance(option, bool):
            raise ValueError(f"model option {key!r} must be a string or a number")
    if not options:
        return spec.strip()
    joiner = "&" if "?" in spec else "?"
    return spec.strip() + joiner + urlencode({k: str(v) for k, v in options.items()})
