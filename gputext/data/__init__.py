"""Data files shipped with gputext (the English stopword list); a package so that setuptools installs them as package data."""
