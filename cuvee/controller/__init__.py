"""Controller role: table configs, segment metadata, ideal state, segment completion (leader only).

``Controller(ControllerConfig(...)).start()`` runs one controller; see docs/controller.md. The names are loaded
lazily so that importing the pure completion FSM does not pull in the HTTP stack."""

from typing import Any

__all__ = ["CompletionTiming", "Controller", "ControllerConfig"]


def __getattr__(name: str) -> Any:
    if name in ("CompletionTiming", "ControllerConfig"):
        from cuvee.controller import config

        return getattr(config, name)
    if name == "Controller":
        from cuvee.controller.controller import Controller

        return Controller
    raise AttributeError(name)
