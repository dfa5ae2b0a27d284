"""The system of record. Nothing is deleted: bad or vanished files keep their rows with a status
and a reason, and re-runs update rows in place (unique constraints make them idempotent).

One module per stage (same app label, ``curation``); every model is importable from here."""
from curation.models.certification import CertificationPlan, CertificationUnit
from curation.models.class_filter import ClassDecision, ClassFilterRun, ClassOverride
from curation.models.counters import AnnotatorQueueCount, QueueClassCount, ReviewStatsSnapshot, SourceImageCount
from curation.models.evaluation import EvalFeatureSet, EvaluationRun
from curation.models.exports import Export, ExportMember
from curation.models.image_pipeline import ClassVisualSignal, DuplicateOverride, FeatureShard, ImageEmbedding
from curation.models.jobs import AuditLog, Job, JobChunk
from curation.models.review import AnnotatorScope, Assignment, Review, ReviewDecision, ReviewItem, ReviewSettings, SynsetText
from curation.models.sources import CandidateClass, IdClassSet, Image, Source

__all__ = [
    "AnnotatorQueueCount",
    "AnnotatorScope",
    "Assignment",
    "AuditLog",
    "CandidateClass",
    "CertificationPlan",
    "CertificationUnit",
    "ClassDecision",
    "ClassFilterRun",
    "ClassOverride",
    "ClassVisualSignal",
    "DuplicateOverride",
    "EvalFeatureSet",
    "EvaluationRun",
    "Export",
    "ExportMember",
    "FeatureShard",
    "IdClassSet",
    "Image",
    "ImageEmbedding",
    "Job",
    "JobChunk",
    "Review",
    "QueueClassCount",
    "ReviewDecision",
    "ReviewItem",
    "ReviewSettings",
    "ReviewStatsSnapshot",
    "Source",
    "SourceImageCount",
    "SynsetText",
]
