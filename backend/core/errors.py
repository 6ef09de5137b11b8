"""User-facing errors. Each message names the thing, the bad value and what is allowed."""


class DetourError(Exception):
    """Base class: anything the CLI prints as one clean line and the UI shows next to a field."""


class ConfigError(DetourError):
    def __init__(self, key: str, value: object, allowed: str):
        self.key, self.value, self.allowed = key, value, allowed
        super().__init__(f"config key '{key}': got {value!r}; {allowed}")


class ModelSpecError(DetourError):
    pass


class DataError(DetourError):
    pass


class CheckpointError(DetourError):
    pass


class RunStartedError(DetourError):
    """A run directory that has already trained was asked to start again: runs are never retrained in place."""


class NonFiniteError(DetourError):
    """Training met NaN or infinity (loss, gradient norm, held-out loss, weights). The run stops as ``failed``
    before anything computed from it is saved; the message names the step, the values and the last good
    checkpoint to resume from."""


class ExportError(DetourError):
    """A model that cannot be exported or pushed (not a finished run or a kept fine-tuned model, a push offline or
    without a token): said before anything is written, locally or on the Hub."""
