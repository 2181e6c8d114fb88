"""A device plugin written for a plugin API version tg-core doesn't speak."""
TG_PLUGIN_API_VERSION = 0
