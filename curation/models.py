"""The system of record. Nothing is deleted: bad or vanished files keep their rows with a status
and a reason, and re-runs update rows in place (unique constraints make them idempotent)."""
from __future__ import annotations

from django.conf import settings
from django.db import models


class IdClassSet(models.Model):
    """The in-distribution classes (ImageNet-1K by default, or any list of WordNet nouns)."""

    name = models.SlugField(max_length=100, unique=True)
    spec = models.CharField(max_length=500, help_text="Named list (imagenet-1k) or the file it came from")
    wnids = models.JSONField(help_text="WordNet 3.0 noun ids, in order")
    is_default = models.BooleanField(default=False)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "ID class set"
        constraints = [
            models.UniqueConstraint(fields=["is_default"], condition=models.Q(is_default=True), name="one_default_id_class_set"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({len(self.wnids)} classes)"


class Source(models.Model):
    class Role(models.TextChoices):
        CANDIDATE = "candidate", "OOD candidates"
        ID = "id", "ID reference"

    name = models.SlugField(max_length=100, unique=True)
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.CANDIDATE, db_index=True)
    root = models.CharField(max_length=1024, help_text="Absolute folder: ROOT/<class folder>/<image files>")
    class_map = models.JSONField(default=dict, blank=True, help_text="folder -> wnid overrides")
    description = models.TextField(blank=True)
    provenance = models.JSONField(default=dict, blank=True,
                                  help_text="How the toolkit made this source, if it did (e.g. a corruption of another source)")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class CandidateClass(models.Model):
    """A class folder of a source and the WordNet synset it maps to (if any)."""

    class Mapping(models.TextChoices):
        WNID_FOLDER = "wnid_folder", "folder named by wnid"
        CLASS_MAP = "class_map", "class-map CSV"
        LEMMA = "lemma", "WordNet lemma lookup"
        UNMAPPED = "unmapped", "unmapped"

    source = models.ForeignKey(Source, on_delete=models.CASCADE, related_name="classes")
    folder = models.CharField(max_length=255)
    wnid = models.CharField(max_length=9, blank=True, db_index=True)
    synset_name = models.CharField(max_length=255, blank=True)
    lemmas = models.JSONField(default=list, blank=True)
    gloss = models.TextField(blank=True)
    mapping = models.CharField(max_length=16, choices=Mapping.choices)
    mapping_note = models.TextField(blank=True)

    class Meta:
        verbose_name_plural = "candidate classes"
        constraints = [models.UniqueConstraint(fields=["source", "folder"], name="unique_class_folder_per_source")]
        ordering = ["source", "folder"]

    def __str__(self) -> str:
        return f"{self.source.name}/{self.folder}" + (f" ({self.wnid})" if self.wnid else " (unmapped)")

    @property
    def label(self) -> str:
        """The class as pages, CSVs and plots name it (pipelines.names.class_label)."""
        from pipelines.names import class_label

        return class_label(self.wnid, (self.lemmas or [""])[0] or self.synset_name, self.folder)


class Image(models.Model):
    class Status(models.TextChoices):
        OK = "ok", "ok"
        BROKEN = "broken", "broken or refused"
        DUPLICATE = "duplicate", "exact duplicate"
        MISSING = "missing", "missing on disk"

    source = models.ForeignKey(Source, on_delete=models.CASCADE, related_name="images")
    candidate_class = models.ForeignKey(CandidateClass, null=True, blank=True, on_delete=models.PROTECT, related_name="images")
    relative_path = models.CharField(max_length=1024)
    sha256 = models.CharField(max_length=64, blank=True, db_index=True)
    width = models.PositiveIntegerField(default=0, help_text="After EXIF orientation")
    height = models.PositiveIntegerField(default=0)
    orientation = models.PositiveSmallIntegerField(default=1, help_text="EXIF orientation tag (1 = upright)")
    format = models.CharField(max_length=16, blank=True)
    mode = models.CharField(max_length=16, blank=True)
    bytes = models.BigIntegerField(default=0)
    mtime_ns = models.BigIntegerField(default=0)
    status = models.CharField(max_length=16, choices=Status.choices, db_index=True)
    error_code = models.CharField(max_length=64, blank=True, db_index=True)
    error = models.TextField(blank=True)
    duplicate_of = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["source", "relative_path"], name="unique_image_path_per_source")]
        indexes = [models.Index(fields=["source", "status"]), models.Index(fields=["source", "sha256"])]
        ordering = ["source", "relative_path"]

    def __str__(self) -> str:
        return f"{self.source.name}:{self.relative_path}"


class Job(models.Model):
    """A unit of background work with its config recorded before it starts."""

    class Kind(models.TextChoices):
        INGEST = "ingest", "ingest a source"
        CLASS_FILTER = "class_filter", "class filter (WordNet rules)"
        EXTRACT = "extract", "predictions and features"
        DEDUP = "dedup", "near-duplicates and similarity to ID"
        EXPORT = "export", "export a clean set"
        UNIT_TESTS = "unit_tests", "generate OOD unit tests"
        EVALUATE = "evaluate", "evaluation run (OOD detectors x models)"
        COVARIATE_SHIFT = "covariate_shift", "covariate-shifted copies (ImageNet-C corruptions)"

    class Status(models.TextChoices):
        PENDING = "pending", "pending"
        RUNNING = "running", "running"
        DONE = "done", "done"
        FAILED = "failed", "failed"

    kind = models.CharField(max_length=32, choices=Kind.choices, db_index=True)
    source = models.ForeignKey(Source, null=True, blank=True, on_delete=models.CASCADE, related_name="jobs")
    config = models.JSONField(default=dict, blank=True)
    code_version = models.CharField(max_length=64, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING, db_index=True)
    progress = models.PositiveIntegerField(default=0)
    total = models.PositiveIntegerField(default=0)
    message = models.TextField(blank=True)
    result = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True, help_text="When a worker last reported working on this job")
    worker = models.CharField(max_length=200, blank=True, help_text="host:pid of the process that last reported")

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} #{self.pk} ({self.status})"

    @property
    def percent(self) -> int:
        return int(100 * self.progress / self.total) if self.total else (100 if self.status == self.Status.DONE else 0)


class JobChunk(models.Model):
    """One slice of a job's work. A chunk is done exactly once: its rows and its done flag are
    written in one transaction, so a killed worker leaves it pending and a redelivery redoes it."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="chunks")
    index = models.PositiveIntegerField()
    payload = models.JSONField()
    done = models.BooleanField(default=False)
    stats = models.JSONField(default=dict, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    done_at = models.DateTimeField(null=True, blank=True)
    # A worker holds a chunk while it works on it and extends the lease with its heartbeat; a
    # second delivery of the chunk skips it while the lease is live (see curation/jobs/).
    lease_owner = models.CharField(max_length=200, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["job", "index"], name="unique_chunk_per_job")]
        ordering = ["job", "index"]


class AuditLog(models.Model):
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    action = models.CharField(max_length=64, db_index=True)
    target_type = models.CharField(max_length=64, blank=True)
    target_id = models.CharField(max_length=64, blank=True)
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M} {self.actor or 'system'} {self.action} {self.target_type}:{self.target_id}"


class ClassFilterRun(models.Model):
    """One run of the WordNet class rules over a candidate list, with everything it used
    recorded before it starts (candidates, ID classes, resolved policy, WordNet, code)."""

    job = models.OneToOneField(Job, on_delete=models.CASCADE, related_name="class_filter_run")
    source = models.ForeignKey(Source, null=True, blank=True, on_delete=models.CASCADE, related_name="class_filter_runs")
    candidates_spec = models.CharField(max_length=500, help_text="Named list, wnid file or source:NAME")
    id_spec = models.CharField(max_length=500)
    id_wnids = models.JSONField(help_text="The ID classes the run compared against")
    policy_name = models.CharField(max_length=200)
    policy_origin = models.CharField(max_length=500)
    policy = models.JSONField(help_text="The resolved policy: every rule's severity and parameters")
    policy_digest = models.CharField(max_length=64, db_index=True)
    wordnet_sha1 = models.CharField(max_length=40, blank=True)
    counts = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"class filter #{self.pk}: {self.candidates_spec} vs {self.id_spec} ({self.policy_name})"


class ClassDecision(models.Model):
    """The decision on one candidate class in one run. ``rule_decision`` is what the rules
    said; ``decision`` is the effective one after a pinned override or a curator's resolution
    of a flag (both say so in ``rule`` / ``detail``)."""

    class Decision(models.TextChoices):
        KEEP = "keep", "keep"
        FLAG = "flag", "flag (needs a curator)"
        REMOVE = "remove", "remove"

    class Resolution(models.TextChoices):
        NONE = "", "unresolved"
        KEEP = "keep", "kept by a curator"
        REMOVE = "remove", "removed by a curator"

    run = models.ForeignKey(ClassFilterRun, on_delete=models.CASCADE, related_name="decisions")
    position = models.PositiveIntegerField()
    key = models.CharField(max_length=255, help_text="The wnid, or the source's class folder")
    wnid = models.CharField(max_length=9, blank=True, db_index=True)
    name = models.CharField(max_length=255)
    synset = models.CharField(max_length=255, blank=True)
    candidate_class = models.ForeignKey(CandidateClass, null=True, blank=True, on_delete=models.SET_NULL, related_name="decisions")
    n_images = models.PositiveIntegerField(null=True, blank=True)
    rule_decision = models.CharField(max_length=8, choices=Decision.choices)
    rule_name = models.CharField("rules' deciding rule", max_length=64, blank=True)
    rule_related_wnid = models.CharField(max_length=9, blank=True)
    rule_related_name = models.CharField(max_length=255, blank=True)
    rule_detail = models.TextField(blank=True, help_text="Every rule that fired, with its WordNet path")
    fired = models.JSONField(default=list, blank=True)
    decision = models.CharField(max_length=8, choices=Decision.choices, db_index=True)
    rule = models.CharField(max_length=64, blank=True, db_index=True)
    detail = models.TextField(blank=True)
    resolution = models.CharField(max_length=8, choices=Resolution.choices, blank=True, default="", db_index=True)
    resolution_note = models.TextField(blank=True)
    resolved_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolution_from = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
                                        help_text="The earlier decision whose resolution this one carried over")
    # semantic distance to the ID set (pipelines.semantic; docs/class_filter.md)
    semantic_similarity = models.FloatField(null=True, blank=True, help_text="Lin similarity (intrinsic IC) to the closest ID class")
    closest_id_wnid = models.CharField(max_length=9, blank=True)
    closest_id_name = models.CharField(max_length=255, blank=True)
    path_distance = models.PositiveSmallIntegerField(null=True, blank=True, help_text="Fewest hypernym edges to any ID class")
    # ranked flags (pipelines.class_filter.strength): set on rows the rules flagged
    flag_strength = models.FloatField(null=True, blank=True, db_index=True)
    flag_level = models.CharField(max_length=6, blank=True, db_index=True)
    evidence_wnids = models.JSONField(default=list, blank=True, help_text="ID wnids whose predictions count as image evidence")
    image_top1_share = models.FloatField(null=True, blank=True)
    image_top5_share = models.FloatField(null=True, blank=True)
    evidence_model = models.CharField(max_length=200, blank=True, help_text="The model whose predictions gave the image evidence")

    class Meta:
        ordering = ["run", "position"]
        constraints = [models.UniqueConstraint(fields=["run", "key"], name="unique_class_decision_per_run")]
        indexes = [models.Index(fields=["run", "decision"]), models.Index(fields=["run", "rule"])]

    def __str__(self) -> str:
        return f"{self.name} ({self.wnid or self.key}): {self.decision}"

    @property
    def related_wnid(self) -> str:
        return "" if self.rule.startswith("override_") else self.rule_related_wnid

    @property
    def related_name(self) -> str:
        return "" if self.rule.startswith("override_") else self.rule_related_name


class ClassOverride(models.Model):
    """A curator's pinned decision on a synset: wins over every rule, in every run."""

    class Action(models.TextChoices):
        ALLOW = "allow", "allow (always keep)"
        DENY = "deny", "deny (always remove)"

    wnid = models.CharField(max_length=9, unique=True)
    name = models.CharField(max_length=255, blank=True)
    action = models.CharField(max_length=8, choices=Action.choices)
    note = models.TextField(blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["wnid"]

    def __str__(self) -> str:
        return f"{self.action} {self.wnid} {self.name}"


class FeatureShard(models.Model):
    """One ``.npy`` file of float16 penultimate features (rows = images) under FEATURE_STORE."""

    model_name = models.CharField(max_length=200, db_index=True)
    path = models.CharField(max_length=500, unique=True, help_text="Relative to the feature store")
    rows = models.PositiveIntegerField()
    dim = models.PositiveIntegerField()
    decoder = models.CharField(max_length=20, default="pil", help_text="How the images became model inputs: pil or torchvision")
    job = models.ForeignKey(Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.path


class ImageEmbedding(models.Model):
    """What one model said about one image (once per image and model), where its features are,
    and what the duplicate search decided."""

    image = models.ForeignKey(Image, on_delete=models.CASCADE, related_name="embeddings")
    model_name = models.CharField(max_length=200)
    ok = models.BooleanField(default=True)
    error = models.TextField(blank=True)
    shard = models.ForeignKey(FeatureShard, null=True, blank=True, on_delete=models.PROTECT, related_name="embeddings")
    row = models.IntegerField(default=-1)
    topk = models.JSONField(default=list, blank=True, help_text="[[wnid, probability], ...], best first")
    top1_wnid = models.CharField(max_length=9, blank=True, db_index=True)
    top1_prob = models.FloatField(null=True, blank=True)
    max_softmax = models.FloatField(null=True, blank=True)
    max_logit = models.FloatField(null=True, blank=True)
    energy = models.FloatField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # written by the duplicate search (re-run from scratch each time)
    dup_group = models.BigIntegerField(null=True, blank=True, help_text="The image id of its group's representative")
    drop_reason = models.CharField(max_length=80, blank=True, db_index=True)
    nearest_id_image = models.ForeignKey(Image, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    nearest_id_similarity = models.FloatField(null=True, blank=True, db_index=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["image", "model_name"], name="one_embedding_per_image_and_model")]
        indexes = [models.Index(fields=["model_name", "drop_reason"])]

    def __str__(self) -> str:
        return f"{self.model_name}: image {self.image_id}"


class ClassVisualSignal(models.Model):
    """Per candidate class and model: the share of its images whose top-1 is one ID class
    (C-OOD: most models call over half of the viceroy images monarch)."""

    candidate_class = models.ForeignKey(CandidateClass, on_delete=models.CASCADE, related_name="visual_signals")
    model_name = models.CharField(max_length=200)
    n_images = models.PositiveIntegerField()
    top_wnid = models.CharField(max_length=9, blank=True)
    top_label = models.CharField(max_length=255, blank=True)
    top_share = models.FloatField(default=0.0)
    threshold = models.FloatField()
    flagged = models.BooleanField(default=False, db_index=True)
    reason = models.CharField(max_length=64, blank=True)
    updated_at = models.DateTimeField(auto_now=True)
    # a curator's answer to the flag on the class-level review screen (kept across re-runs)
    resolution = models.CharField(max_length=8, choices=[("", "unresolved"), ("accept", "class accepted"), ("reject", "class rejected")],
                                  blank=True, default="")
    resolution_note = models.TextField(blank=True)
    resolved_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["candidate_class", "model_name"], name="one_visual_signal_per_class_and_model")]

    def __str__(self) -> str:
        return f"{self.candidate_class}: {self.top_share:.0%} {self.top_label}"


# -- review ----------------------------------------------------------------------------------------

class ReviewDecision(models.TextChoices):
    """The decision schema for a reviewed image (DESIGN.md; shown in the UI's help and exports)."""

    OOD = "ood", "ood: no ID object visible, the OOD class is"
    ID = "id", "id: an ID object is at least partly visible"
    UNCLEAR = "unclear", "unclear: cannot tell (excluded, like NINCO's ambiguous images)"
    NOT_TARGET = "not_target", "not_target: no object of the OOD class, or the label is wrong"
    SKIP = "skip", "skip: no decision"


class SynsetText(models.Model):
    """Names, lemmas and gloss of the synsets the review screen shows (ID classes, candidate
    classes), copied from WordNet when a queue is built so web requests need no WordNet."""

    wnid = models.CharField(max_length=9, unique=True)
    name = models.CharField(max_length=255)
    label = models.CharField(max_length=255)
    lemmas = models.JSONField(default=list)
    gloss = models.TextField(blank=True)

    def __str__(self) -> str:
        return f"{self.wnid} {self.label}"


class ReviewSettings(models.Model):
    """How a source (or one of its classes, which then wins) is reviewed."""

    class Order(models.TextChoices):
        NEAREST_ID = "nearest_id", "closest to ID images first"
        RANDOM = "random", "random"

    source = models.ForeignKey(Source, on_delete=models.CASCADE, related_name="review_settings")
    candidate_class = models.ForeignKey(CandidateClass, null=True, blank=True, on_delete=models.CASCADE, related_name="review_settings",
                                        help_text="Empty: the whole source")
    reviews_required = models.PositiveSmallIntegerField(default=1, help_text="Independent reviews each image needs (1-9)")
    order = models.CharField(max_length=16, choices=Order.choices, default=Order.NEAREST_ID)
    gold_rate = models.FloatField(default=0.0, help_text="Share of served images that are gold (0 to 0.5)")
    updated_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "review settings"
        constraints = [
            models.UniqueConstraint(fields=["source"], condition=models.Q(candidate_class=None), name="one_review_setting_per_source"),
            models.UniqueConstraint(fields=["source", "candidate_class"], name="one_review_setting_per_class"),
            models.CheckConstraint(condition=models.Q(reviews_required__gte=1, reviews_required__lte=9), name="reviews_required_1_to_9"),
            models.CheckConstraint(condition=models.Q(gold_rate__gte=0, gold_rate__lte=0.5), name="gold_rate_0_to_half"),
        ]

    def __str__(self) -> str:
        scope = self.candidate_class.folder if self.candidate_class_id else "all classes"
        return f"{self.source.name} / {scope}: {self.reviews_required} review(s), {self.order}"


class AnnotatorScope(models.Model):
    """Restricts an annotator to sources or classes. An annotator without scopes reviews every
    candidate source."""

    annotator = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="review_scopes")
    source = models.ForeignKey(Source, on_delete=models.CASCADE, related_name="+")
    candidate_class = models.ForeignKey(CandidateClass, null=True, blank=True, on_delete=models.CASCADE, related_name="+",
                                        help_text="Empty: every class of the source")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["annotator", "source"], condition=models.Q(candidate_class=None), name="unique_annotator_source_scope"),
            models.UniqueConstraint(fields=["annotator", "source", "candidate_class"], name="unique_annotator_class_scope"),
        ]

    def __str__(self) -> str:
        return f"{self.annotator} -> {self.source.name}" + (f"/{self.candidate_class.folder}" if self.candidate_class_id else "")


class ReviewItem(models.Model):
    """One candidate image in the review queue, with its counters (``done`` reviews, ``leased``
    open leases) and, once complete, its final decision."""

    class Status(models.TextChoices):
        OPEN = "open", "open"
        COMPLETE = "complete", "complete (reviews agree)"
        CONFLICT = "conflict", "conflict (needs adjudication)"
        ADJUDICATED = "adjudicated", "adjudicated"
        WITHDRAWN = "withdrawn", "withdrawn (its class or image left the pool)"

    FINAL = (Status.COMPLETE, Status.ADJUDICATED)  # decided: the reviews agreed, or a curator adjudicated

    image = models.OneToOneField(Image, on_delete=models.CASCADE, related_name="review_item")
    source = models.ForeignKey(Source, on_delete=models.CASCADE, related_name="review_items")
    candidate_class = models.ForeignKey(CandidateClass, null=True, blank=True, on_delete=models.CASCADE, related_name="review_items")
    priority = models.FloatField(default=0.0, help_text="Lower is served first")
    required = models.PositiveSmallIntegerField(default=1)
    done = models.PositiveSmallIntegerField(default=0)
    leased = models.PositiveSmallIntegerField(default=0)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.OPEN)
    final_decision = models.CharField(max_length=12, choices=ReviewDecision.choices, blank=True, db_index=True)
    final_wnids = models.JSONField(default=list, blank=True)
    final_note = models.TextField(blank=True)
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
                                   help_text="The adjudicating curator (empty when the reviews agreed)")
    decided_at = models.DateTimeField(null=True, blank=True)
    is_gold = models.BooleanField(default=False, db_index=True, help_text="Served to annotators as a known answer")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [
            models.Index(fields=["priority", "id"], condition=models.Q(status="open"), name="review_item_open_queue"),
            models.Index(fields=["source", "status"]),
            models.Index(fields=["candidate_class", "status"]),
        ]

    def __str__(self) -> str:
        return f"review of image {self.image_id} ({self.status}, {self.done}/{self.required})"


class Assignment(models.Model):
    """An image leased to an annotator. One row per (image, annotator): the same annotator is
    never given an image twice; a lease that expires goes back to the queue."""

    class State(models.TextChoices):
        LEASED = "leased", "leased"
        DONE = "done", "decided"
        SKIPPED = "skipped", "skipped"
        EXPIRED = "expired", "lease expired"

    item = models.ForeignKey(ReviewItem, on_delete=models.CASCADE, related_name="assignments")
    annotator = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="review_assignments")
    state = models.CharField(max_length=8, choices=State.choices, default=State.LEASED)
    is_gold = models.BooleanField(default=False)
    leased_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["item", "annotator"], name="one_assignment_per_image_and_annotator")]
        indexes = [
            models.Index(fields=["annotator", "state", "leased_at"]),
            models.Index(fields=["expires_at"], condition=models.Q(state="leased"), name="assignment_open_leases"),
        ]

    def __str__(self) -> str:
        return f"{self.annotator} <- item {self.item_id} ({self.state})"


class Review(models.Model):
    """One annotator's decision on one image (``skip`` is recorded on the assignment instead)."""

    item = models.ForeignKey(ReviewItem, on_delete=models.CASCADE, related_name="reviews")
    annotator = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="reviews")
    assignment = models.OneToOneField(Assignment, on_delete=models.CASCADE, related_name="review")
    decision = models.CharField(max_length=12, choices=ReviewDecision.choices)
    id_wnids = models.JSONField(default=list, blank=True, help_text="The ID classes seen (decision id)")
    note = models.TextField(blank=True)
    seconds = models.FloatField(help_text="From the image being served to the decision (capped at 5 minutes)")
    is_gold = models.BooleanField(default=False)
    gold_correct = models.BooleanField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["item", "annotator"], name="one_review_per_image_and_annotator")]
        indexes = [models.Index(fields=["annotator", "created_at"])]

    def __str__(self) -> str:
        return f"{self.annotator}: {self.decision} on item {self.item_id}"


# -- exports ---------------------------------------------------------------------------------------


class Export(models.Model):
    """One immutable, versioned export: a clean OOD set (kind ``dataset``) or NINCO's synthetic
    OOD unit tests (kind ``unit_tests``), written once under EXPORT_ROOT/<name>/v<version>/."""

    class Kind(models.TextChoices):
        DATASET = "dataset", "clean OOD set"
        UNIT_TESTS = "unit_tests", "OOD unit tests"

    class Status(models.TextChoices):
        PENDING = "pending", "pending"
        RUNNING = "running", "running"
        BLOCKED = "blocked", "blocked by the leakage check"
        DONE = "done", "done"
        FAILED = "failed", "failed"

    name = models.SlugField(max_length=100)
    version = models.PositiveIntegerField()
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.DATASET)
    split = models.SlugField(max_length=40, default="test", help_text="Images may not be near-duplicates of another split's")
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.PENDING, db_index=True)
    job = models.OneToOneField(Job, on_delete=models.PROTECT, related_name="export")
    config = models.JSONField(default=dict)
    path = models.CharField(max_length=500, blank=True, help_text="Relative to EXPORT_ROOT, once written")
    manifest_sha256 = models.CharField(max_length=64, blank=True)
    counts = models.JSONField(default=dict, blank=True)
    leakage = models.JSONField(default=dict, blank=True)
    leakage_override = models.TextField(blank=True, help_text="The curator's reason to export despite leakage")
    message = models.TextField(blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        # A failed attempt writes nothing and gives its version number back: the next export of
        # that name takes it. Only exports that stand hold their (name, version).
        constraints = [models.UniqueConstraint(fields=["name", "version"], condition=~models.Q(status="failed"),
                                               name="unique_export_version")]

    def __str__(self) -> str:
        return f"{self.label} ({self.get_kind_display()}, {self.status})"

    @property
    def label(self) -> str:
        if self.status == self.Status.FAILED:
            return f"{self.name} (failed attempt #{self.pk})"
        return f"{self.name}-v{self.version}"


class ExportMember(models.Model):
    """An image an export carries (dataset exports): what the leakage check of later exports
    compares with, and the provenance query "which exports hold this image"."""

    export = models.ForeignKey(Export, on_delete=models.CASCADE, related_name="members")
    image = models.ForeignKey(Image, on_delete=models.PROTECT, related_name="export_memberships")
    sha256 = models.CharField(max_length=64, db_index=True)
    wnid = models.CharField(max_length=9, blank=True)
    files = models.JSONField(default=dict, help_text="layout -> path inside the export")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["export", "image"], name="unique_image_per_export")]


# -- evaluation --------------------------------------------------------------------------------------


class EvalFeatureSet(models.Model):
    """One model's outputs (features, logits, labels) on one image set at one version, cached on
    disk under EVAL_ROOT and reused by every later run with the same model and data."""

    model_name = models.CharField(max_length=200, db_index=True)
    dataset = models.CharField(max_length=200, help_text="source:NAME, export:NAME-vN or import:NAME")
    version = models.CharField(max_length=64, help_text="Digest of the image set (file list and hashes) or of the imported file")
    decoder = models.CharField(max_length=20, default="pil",
                               help_text="How the images became model inputs (pil, torchvision); 'unknown' for imported outputs")
    path = models.CharField(max_length=500, help_text="Relative to EVAL_ROOT: the .npz with features, logits, labels, keys, groups")
    images = models.PositiveIntegerField(default=0)
    feature_dim = models.PositiveIntegerField(default=0)
    failed = models.JSONField(default=list, blank=True, help_text="Files the model could not read, with the reason")
    extras = models.JSONField(default=dict, blank=True, help_text="Input-level scores (ODIN) -> .npy path relative to EVAL_ROOT")
    has_head = models.BooleanField(default=False, help_text="Imported sets: the .npz carried the classifier's weight and bias")
    note = models.TextField(blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "cached model outputs"
        verbose_name_plural = "cached model outputs"
        constraints = [models.UniqueConstraint(fields=["model_name", "dataset", "version", "decoder"],
                                               name="one_output_cache_per_model_data_and_decoder")]

    def __str__(self) -> str:
        return f"{self.dataset} with {self.model_name} ({self.images} images)"


class EvaluationRun(models.Model):
    """OOD detectors x models on an export (and optionally a unit-test set), against an ID test
    set, with statistics from an ID fit set. Config, code version and export version are recorded
    when it is created; results are written once by the finishing task."""

    class Status(models.TextChoices):
        PENDING = "pending", "pending"
        RUNNING = "running", "running"
        DONE = "done", "done"
        FAILED = "failed", "failed"

    export = models.ForeignKey(Export, null=True, blank=True, on_delete=models.PROTECT, related_name="evaluations",
                               help_text="The OOD export; empty when the OOD set is part of an ID source (a semantic split)")
    unit_tests = models.ForeignKey(Export, null=True, blank=True, on_delete=models.PROTECT, related_name="unit_test_evaluations")
    id_test = models.CharField(max_length=200, help_text="source:NAME or import:NAME")
    id_fit = models.CharField(max_length=200, help_text="source:NAME or import:NAME")
    model_names = models.JSONField(help_text="Model names, in table order")
    methods = models.JSONField(help_text="Detector names, in table order")
    config = models.JSONField(default=dict, help_text="Everything the run used: parameters, dataset versions, weights")
    code_version = models.CharField(max_length=64, blank=True)
    export_version = models.CharField(max_length=200, blank=True, help_text="NAME-vN and the manifest's sha256")
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.PENDING, db_index=True)
    job = models.OneToOneField(Job, on_delete=models.PROTECT, related_name="evaluation")
    results = models.JSONField(default=dict, blank=True)
    message = models.TextField(blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"evaluation #{self.pk} on {self.ood_label} ({self.status})"

    @property
    def ood_label(self) -> str:
        """The OOD set: an export's NAME-vN, or a set key such as source:val@imagenet-x-ood."""
        if self.export_id:
            return self.export.label
        return (self.config.get("sets", {}).get("ood") or {}).get("key", "?")
