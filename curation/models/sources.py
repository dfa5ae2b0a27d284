"""Sources, their class folders and images, and the ID class sets."""
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
    root = models.CharField(max_length=1024, help_text="Absolute folder: ROOT/<class folder>/<image files>, or the archives' folder")
    layout = models.CharField(max_length=32, default="folder", db_default="folder",
                              help_text="How the root holds its images (pipelines/sources/layouts/): folder, class-tars, wds, parquet")
    layout_options = models.JSONField(default=dict, blank=True,
                                      help_text="The layout's options, and the published list a source was made from (path, format, sha256)")
    class_map = models.JSONField(default=dict, blank=True, help_text="folder -> wnid overrides")
    description = models.TextField(blank=True)
    provenance = models.JSONField(default=dict, blank=True,
                                  help_text="How the toolkit made this source, if it did (e.g. a corruption of another source)")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name

    def member_ref(self, path: str, *, container: str = "", offset: int = -1, size: int = -1, sha256: str = ""):
        """What a reader needs to get one image's bytes through this source's layout."""
        from pipelines.sources.layouts import MemberRef

        return MemberRef(layout=self.layout or "folder", root=self.root, path=path, container=container, offset=offset,
                         size=size, sha256=sha256, column=str((self.layout_options or {}).get("image_column") or ""))


class CandidateClass(models.Model):
    """A class folder of a source and the WordNet synset it maps to (if any)."""

    class Mapping(models.TextChoices):
        WNID_FOLDER = "wnid_folder", "folder named by wnid"
        CLASS_MAP = "class_map", "class-map CSV"
        LEMMA = "lemma", "WordNet lemma lookup"
        UNMAPPED = "unmapped", "unmapped"
        CURATOR = "curator", "mapped by a curator"

    source = models.ForeignKey(Source, on_delete=models.CASCADE, related_name="classes")
    folder = models.CharField(max_length=255)
    wnid = models.CharField(max_length=9, blank=True, db_index=True)
    synset_name = models.CharField(max_length=255, blank=True)
    lemmas = models.JSONField(default=list, blank=True)
    gloss = models.TextField(blank=True)
    mapping = models.CharField(max_length=16, choices=Mapping.choices)
    mapping_note = models.TextField(blank=True)
    description = models.TextField(blank=True, default="", db_default="",
                                   help_text="A curator's description of a class kept unmapped; annotators see it in place of a gloss")

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
    relative_path = models.CharField(max_length=1024, help_text="The member's path in the source: a file under the root, or <archive>/<member>")
    container = models.CharField(max_length=1024, blank=True, default="", db_default="",
                                 help_text="The archive that holds it, relative to the root ('' for a plain file)")
    offset = models.BigIntegerField(default=-1, db_default=-1, help_text="tar: its data offset; Parquet: its row; -1: a plain file")
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
    excluded_reason = models.CharField(max_length=500, blank=True, default="", db_default="",
                                       help_text="A curator excluded the image (image browser): neither reviewed nor exported")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["source", "relative_path"], name="unique_image_path_per_source")]
        indexes = [models.Index(fields=["source", "status"]), models.Index(fields=["source", "sha256"]),
                   models.Index(fields=["candidate_class", "id"], name="image_browse_class"),  # a class's images in order (browser)
                   # the admin's search by a path's beginning (LIKE 'n02085620/%'): the pattern operator
                   # class reads it whatever the database's collation (PostgreSQL; a plain index on SQLite)
                   models.Index(fields=["relative_path"], name="image_path_prefix", opclasses=["varchar_pattern_ops"])]
        ordering = ["source", "relative_path"]

    def __str__(self) -> str:
        return f"{self.source.name}:{self.relative_path}"

    @property
    def member(self) -> str:
        """The image's name inside its archive (its path for a plain file)."""
        return self.relative_path[len(self.container) + 1:] if self.container else self.relative_path

    def ref(self, *, verify: bool = True, root_real: str | None = None):
        """A ``pipelines.sources.layouts.MemberRef`` for this image's bytes; reading it checks them
        against the SHA-256 recorded at ingest (``verify``). A plain file that now resolves outside
        its source's root raises ``pipelines.sources.walk.UnsafePath`` here, before anything reads it."""
        if not self.container:
            from pipelines.sources.walk import safe_join

            safe_join(self.source.root, self.relative_path, root_real=root_real)
        return self.source.member_ref(self.relative_path, container=self.container, offset=self.offset,
                                      size=self.bytes if self.sha256 else -1, sha256=self.sha256 if verify else "")
