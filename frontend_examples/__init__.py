"""Examples of turnqueue clients (SPEC U2): a web page in ``web/`` and a terminal client."""
