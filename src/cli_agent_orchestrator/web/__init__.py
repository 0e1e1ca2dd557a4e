"""The browser UI's server side: the one-time login links and cookie sessions (logins.py) and
the built page and its assets (static.py). The page's source is in ui/ at the top of the repo;
scripts/build-ui.sh rebuilds assets/ from it."""
