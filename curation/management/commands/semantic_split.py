from django.core.management.base import BaseCommand, CommandError

from curation.management.cli import output_folder
from curation.services.id_classes import IdClassSetError, semantic_split_create
from pipelines.classes.wordnet import WordNetUnavailable
from pipelines.names import PathOutsideRoot


class Command(BaseCommand):
    help = (
        "Split an ID class set into ID and OOD halves by WordNet parent, so that close relatives land on opposite "
        "sides (ImageNet-X, paper 004 sec. 2.1). The default is the authors' deterministic procedure; for ImageNet-1K "
        "it gives their published 500/500 lists."
    )

    def add_arguments(self, parser):
        parser.add_argument("--id", default="imagenet-1k", dest="id_spec",
                            help="the classes to split: imagenet-1k (default), a registered ID class set, or a file of wnids")
        parser.add_argument("--out", required=True,
                            help="a new or empty folder for id_classes.txt, ood_classes.txt, parents.csv and summary.json")
        parser.add_argument("--seed", type=int,
                            help="the seeded variant: shuffle each parent's children and the first odd group's side with this seed")
        parser.add_argument("--images", metavar="SOURCE",
                            help="also list an ID source's images of each half (images_id.txt with labels 0..n-1 in "
                                 "id_classes.txt order, images_ood.txt with -1; OpenOOD's '<path> <label>' format)")
        parser.add_argument("--register", metavar="NAME",
                            help="also store the halves as ID class sets NAME-id and NAME-ood (for filter_classes --id, evaluate)")

    def handle(self, *args, id_spec, out, seed=None, register=None, images=None, **opts):
        folder = output_folder(out, "--out")
        try:
            split, files, sets = semantic_split_create(id_spec=id_spec, out_dir=folder, seed=seed, register=register,
                                                               images=images)
        except (IdClassSetError, WordNetUnavailable, PathOutsideRoot) as exc:
            raise CommandError(str(exc)) from None
        s = split.summary()
        self.stdout.write(self.style.SUCCESS(
            f"Semantic split of {id_spec} ({s['procedure']}{'' if seed is None else f', seed {seed}'}): "
            f"{s['id_classes']} ID / {s['ood_classes']} OOD classes under {s['parents']} parents"))
        self.stdout.write(
            f"  {s['parents_with_several_children']} parents have two or more classes; {s['parents_split_across_sides']} of them "
            f"are split across the sides")
        self.stdout.write(
            f"  {s['single_child_parents']} classes are their parent's only child ({s['single_child_classes_id']} ID, "
            f"{s['single_child_parents'] - s['single_child_classes_id']} OOD): no sibling on the other side")
        self.stdout.write(f"  {s['classes_with_several_parents']} classes have several WordNet parents; the choice is in summary.json")
        self.stdout.write("  largest groups: " + ", ".join(f"{g['name']} {g['children']} ({g['id']} ID)" for g in s["largest_groups"]))
        for path in files:
            self.stdout.write(f"  wrote {path}")
        for obj in sets:
            self.stdout.write(f"  ID class set {obj.name!r}: {len(obj.wnids)} classes")
        if sets and images:
            src = images.removeprefix("source:")
            self.stdout.write(f"  evaluate it: python manage.py evaluate --ood source:{src}@{register}-ood "
                              f"--id-test source:{src}@{register}-id --id-fit source:YOUR_FIT_SOURCE@{register}-id "
                              f"--restrict-logits {register}-id")
