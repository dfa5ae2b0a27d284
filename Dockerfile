# One image for web and workers. Build: docker compose build
FROM python:3.11-slim-bookworm
RUN apt-get update && apt-get install -y --no-install-recommends wordnet-base wordnet-sense-index git \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt
COPY . .
ENV NLTK_DATA=/data/nltk_data OODC_DATA_DIR=/data PYTHONUNBUFFERED=1
CMD ["gunicorn", "curation.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3"]
