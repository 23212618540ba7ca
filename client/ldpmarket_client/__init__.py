"""Python client and command line for the buyer API of an ldpmarket service (docs/client.md)."""
from .client import Client
from .errors import ClientError, ProblemError, PurchaseFailed, WaitTimeout

__all__ = ["Client", "ClientError", "ProblemError", "PurchaseFailed", "WaitTimeout"]
__version__ = "0.1.0"
