"""Python client and command line for the buyer API of an ldpmarket service, and the owner SDK for values kept on
the owner's machine (docs/client.md)."""
from .client import Client
from .errors import ClientError, ProblemError, PurchaseFailed, WaitTimeout
from .owner import Owner, OwnerError

__all__ = ["Client", "ClientError", "Owner", "OwnerError", "ProblemError", "PurchaseFailed", "WaitTimeout"]
__version__ = "0.1.0"
