# One image for web and workers. Build: docker compose build
FROM python:3.11-slim-bookworm
# the app's system packages: the one list scripts/setup.sh installs too (scripts/system-packages.txt)
COPY scripts/system-packages.txt scripts/system-packages.sh /tmp/oodc-packages/
RUN apt-get update \
    && apt-get install -y --no-install-recommends $(sh /tmp/oodc-packages/system-packages.sh) \
    && rm -rf /var/lib/apt/lists/* /tmp/oodc-packages
WORKDIR /app
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt
COPY . .
ENV NLTK_DATA=/data/nltk_data OODC_DATA_DIR=/data PYTHONUNBUFFERED=1
CMD ["gunicorn", "curation.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3"]
