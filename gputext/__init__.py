"""gputext: GPU text mining with exact results and a parallel CPU twin.

Public API (each family adds its own module):
    gputext.io        HDF5 corpus format (anndata-compatible) and ingest of text formats
    gputext.backend   choice of cpu / cuda, decided in one place
"""
__version__ = "0.1.0"
