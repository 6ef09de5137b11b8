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
