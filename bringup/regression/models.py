"""Which registry models a regression run certifies (config ``regression.models``, else every
entry that can be fetched here)."""
from __future__ import annotations

from bringup.convert.manifest import supported_architectures
from bringup.core.errors import BringupError
from bringup.fetch.registry import ModelEntry, Registry


def fetchable(entry: ModelEntry) -> bool:
    """True when ``entry`` can be fetched and converted without a maintainer's hand: it is pinned
    (no ``unverified`` note), no source is on the hub (hf:// is unreachable from this network,
    README "Models"), and convert supports its architecture (a tensor map in ``tensor_maps/``,
    ``bringup.convert.manifest.supported_architectures``): a registry entry of a family still
    being brought up is not a nightly regression."""
    return (entry.unverified is None and all(u.scheme != "hf" for u in entry.sources)
            and entry.architecture in supported_architectures())


def select(registry: Registry, configured: list[str] | None, large: list[str] | None = None) -> list[str]:
    """The model names to certify, in the order given (``configured``) or in registry order
    (every fetchable entry when ``configured`` is None or empty, except the ``large`` ones: config
    ``regression.large``, the models of the "large" night, too long for the nightly run). Raises
    BringupError naming the unknown names (in either list) and listing the known ones."""
    unknown = [m for m in (large or []) if m not in registry.models]
    if unknown:
        raise BringupError(f"regression.large: unknown model(s) {', '.join(map(repr, unknown))}; "
                           f"the registry ({registry.path}) has: {', '.join(sorted(registry.models))}")
    if not configured:
        return [name for name, entry in registry.models.items() if fetchable(entry) and name not in (large or [])]
    unknown = [m for m in configured if m not in registry.models]
    if unknown:
        raise BringupError(f"unknown model(s) {', '.join(map(repr, unknown))}; "
                           f"the registry ({registry.path}) has: {', '.join(sorted(registry.models))}")
    return list(dict.fromkeys(configured))
