"""tg's pytest plugin: `pytest --tg-device NAME` runs tests on any installed device."""
