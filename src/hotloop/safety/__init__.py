"""Safety classifiers over a turn's new items: secrets anywhere, prompt injection in tool outputs."""

from hotloop.safety.base import Action, Classifier, Finding, Verdict, redact, worst
from hotloop.safety.cache import ScanCache
from hotloop.safety.injection import InjectionClassifier, InjectionState
from hotloop.safety.secrets import SecretsClassifier, SecretsState, find_secrets, shannon_entropy
from hotloop.safety.stage import CLASSIFIERS, SafetyResult, SafetyStage, SafetyStates

__all__ = [
    "CLASSIFIERS",
    "Action",
    "Classifier",
    "Finding",
    "InjectionClassifier",
    "InjectionState",
    "SafetyResult",
    "SafetyStage",
    "SafetyStates",
    "ScanCache",
    "SecretsClassifier",
    "SecretsState",
    "Verdict",
    "find_secrets",
    "redact",
    "shannon_entropy",
    "worst",
]
