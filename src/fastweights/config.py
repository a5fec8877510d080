"""Typed configs: dataclasses + YAML presets + ``key=value`` overrides (OmegaConf)."""

from __future__ import annotations

from dataclasses import is_dataclass
from pathlib import Path
from typing import Any, TypeVar

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

__all__ = [
    "CONFIG_DIR",
    "preset_path",
    "load_config",
    "apply_overrides",
    "config_to_yaml",
    "config_from_yaml",
]

T = TypeVar("T")

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"


def preset_path(recipe: str, preset: str) -> Path:
    """Path of ``configs/<recipe>/<preset>.yaml`` (or ``preset`` itself if it is a YAML file path).

    Raises:
        FileNotFoundError: listing the available presets.
    """
    p = Path(preset)
    if p.suffix in (".yaml", ".yml") and p.exists():
        return p
    path = CONFIG_DIR / recipe / f"{preset}.yaml"
    if not path.exists():
        available = sorted(q.stem for q in (CONFIG_DIR / recipe).glob("*.yaml"))
        raise FileNotFoundError(f"preset: no {path}; available presets for {recipe!r}: {available}")
    return path


def load_config(cls: type[T], yaml_path: Path | None = None, overrides: list[str] | None = None) -> T:
    """Merge ``cls`` defaults ← YAML file ← ``key=value`` overrides and return a typed ``cls``.

    Raises:
        ValueError: for unknown keys or values of the wrong type (naming the key).
    """
    if not is_dataclass(cls):
        raise TypeError(f"cls: expected a dataclass type, got {cls!r}")
    try:
        merged = OmegaConf.structured(cls)
        if yaml_path is not None:
            merged = OmegaConf.merge(merged, OmegaConf.load(yaml_path))
        cfg = OmegaConf.to_object(merged)
    except OmegaConfBaseException as err:
        raise ValueError(f"config: {err}") from err
    return apply_overrides(cfg, overrides or [])  # type: ignore[return-value]


def apply_overrides(cfg: T, overrides: list[str]) -> T:
    """Return a copy of the config dataclass ``cfg`` with ``key=value`` overrides applied.

    Raises:
        ValueError: for unknown keys, values of the wrong type, or items without ``=``.
    """
    bad = [o for o in overrides if "=" not in o]
    if bad:
        raise ValueError(f"overrides: expected key=value items, got {bad}")
    try:
        merged = OmegaConf.merge(OmegaConf.structured(cfg), OmegaConf.from_dotlist(list(overrides)))
        return OmegaConf.to_object(merged)  # type: ignore[return-value]
    except OmegaConfBaseException as err:
        raise ValueError(f"config: {err}") from err


def config_to_yaml(cfg: Any) -> str:
    """Serialise a config dataclass to YAML (saved as ``config.yaml`` in every run folder)."""
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


def config_from_yaml(cls: type[T], text: str) -> T:
    """Inverse of :func:`config_to_yaml`."""
    merged = OmegaConf.merge(OmegaConf.structured(cls), OmegaConf.create(text))
    return OmegaConf.to_object(merged)  # type: ignore[return-value]
