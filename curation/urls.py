from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

admin.site.site_header = "OOD curation"
admin.site.site_title = "OOD curation admin"

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/login/", auth_views.LoginView.as_view(template_name="labeling_ui/login.html"), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", include("labeling_ui.urls")),
]

handler500 = "labeling_ui.http.server_error"  # an outage of the database or Redis: 503 with Retry-After
