"""A page's session without a copy of every component's config.

Gradio makes, for each new page (its first event), a dict holding the config of every block of the app
(``SessionState.config_values``): 565 blocks here, the largest share of a page's first request on 2 cores, though a
page changes a handful of them and the copies are read back only to save a deep link, which this app does not offer.
Here a block's copy is made the first time that page asks for it (an event writing the block's value): every other
block costs nothing, and what a page sees is what Gradio's eager copy gave it (``tests/ui/test_session_state.py``).
"""

from __future__ import annotations

from collections.abc import Iterator

from gradio.state_holder import SessionState, StateHolder


class BlockConfigs(dict):
    """``config_values`` made on demand: a block of the app is present as if copied at the start, its config computed
    by Gradio's ``config_for_block`` when first read; blocks written meanwhile keep what was written."""

    def __init__(self, blocks_config, app_blocks) -> None:
        super().__init__()
        self._config, self._ids = blocks_config, app_blocks

    def _known(self, key) -> bool:
        return key in self._ids and key in self._config.blocks

    def __missing__(self, key):
        if not self._known(key):
            raise KeyError(key)
        value = self[key] = self._config.config_for_block(key, [], self._config.blocks[key])
        return value

    def __contains__(self, key) -> bool:
        return dict.__contains__(self, key) or self._known(key)

    def _all(self) -> None:
        for key in self._config.blocks:
            if self._known(key) and not dict.__contains__(self, key):
                self[key]  # noqa: B018 - computed and kept by __missing__

    def items(self):
        self._all()
        return super().items()

    def values(self):
        self._all()
        return super().values()

    def __iter__(self) -> Iterator:
        self._all()
        return super().__iter__()

    def __len__(self) -> int:
        self._all()
        return super().__len__()


class _NoBlocks:
    """What ``SessionState.__init__`` reads of the app, with no block to copy: its other fields are set as Gradio sets
    them, and ``config_values`` is replaced right after."""

    def __init__(self, blocks) -> None:
        self.default_config, self.blocks = blocks.default_config, {}


class LazySessionState(SessionState):
    def __init__(self, blocks) -> None:
        super().__init__(_NoBlocks(blocks))
        self.config_values = BlockConfigs(self.blocks_config, blocks.blocks)


class LazyStateHolder(StateHolder):
    """Gradio's holder of the pages' sessions, making each new one a ``LazySessionState``."""

    def __getitem__(self, session_id: str) -> SessionState:
        if session_id not in self.session_data:
            self.session_data[session_id] = LazySessionState(self.blocks)
        return super().__getitem__(session_id)


def share_default_configs(holder: StateHolder) -> None:
    """Make the served app's session holder (``demo.server_app.state_holder``, the one object its routes and blocks
    use) start new pages lazily; pages already open keep the sessions they have."""
    holder.__class__ = LazyStateHolder
