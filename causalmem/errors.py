"""Domain errors. Argument errors use the built-in ValueError/TypeError/KeyError."""


class CausalMemError(Exception):
    """Base class of causalmem's own errors."""


class SchemaVersionError(CausalMemError):
    """The database was written by a newer causalmem schema; it is left untouched."""


class StoreError(CausalMemError):
    """The database file cannot be opened or is not a causalmem/SQLite database."""


class LLMError(CausalMemError):
    """An OpenAI-compatible endpoint failed or answered something unusable."""


class ConfigurationError(CausalMemError, ValueError):
    """A feature was asked for that is not configured (e.g. infer=True without an LLM)."""
