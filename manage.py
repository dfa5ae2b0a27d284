#!/usr/bin/env python
"""Django's command-line utility for the OOD curation toolkit."""
import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "curation.settings")
    from django.core.management import execute_from_command_line

    if "--traceback" in sys.argv:  # for developers: errors as Python shows them
        execute_from_command_line(sys.argv)
        return
    try:
        execute_from_command_line(sys.argv)
    except KeyboardInterrupt:
        print("interrupted; an unfinished job can be resumed: python manage.py resume_job --list", file=sys.stderr)
        sys.exit(130)
    except Exception as exc:  # the last net: one line, exit status 1 (commands raise CommandError for known cases)
        text = " ".join(str(exc).split())[:600]
        if type(exc).__name__ in ("OperationalError", "ProgrammingError") and ("no such table" in text or "does not exist" in text):
            text += "; the database is not set up or not up to date: run python manage.py migrate"
        print(f"error: {type(exc).__name__}: {text} (rerun with --traceback for the details)", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
