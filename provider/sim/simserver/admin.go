package simserver

import (
	"errors"
	"io"
	"net/http"
	"time"
)

// adminRoutes adds the /admin API: the Go methods of Server over HTTP, for
// a server run as its own process. Every call needs the admin token.
func (s *Server) adminRoutes(mux *http.ServeMux) {
	mux.Handle("GET /admin/clouds", s.admin(func(r *http.Request) (int, any, error) {
		return http.StatusOK, s.Accounts(), nil
	}))
	mux.Handle("GET /admin/clouds/{cloud}/faults", s.admin(func(r *http.Request) (int, any, error) {
		f, err := s.Faults(r.PathValue("cloud"))
		return http.StatusOK, f, err
	}))
	mux.Handle("PUT /admin/clouds/{cloud}/faults", s.admin(func(r *http.Request) (int, any, error) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			return 0, nil, err
		}
		var f Faults
		if aerr := decode(body, &f); aerr != nil {
			return 0, nil, aerr
		}
		if err := s.SetFaults(r.PathValue("cloud"), f); err != nil {
			return 0, nil, err
		}
		return http.StatusOK, f, nil
	}))
	mux.Handle("GET /admin/clouds/{cloud}/instances", s.admin(func(r *http.Request) (int, any, error) {
		in, err := s.Instances(r.PathValue("cloud"))
		return http.StatusOK, map[string][]Instance{"instances": in}, err
	}))
	mux.Handle("POST /admin/clouds/{cloud}/instances/{id}/preempt", s.admin(func(r *http.Request) (int, any, error) {
		var notice time.Duration
		if v := r.URL.Query().Get("notice"); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return 0, nil, errorf(http.StatusBadRequest, CodeInvalidRequest, "notice %q: want a duration such as 30s", v)
			}
			notice = d
		}
		if err := s.PreemptIn(r.PathValue("cloud"), r.PathValue("id"), notice); err != nil {
			return 0, nil, err
		}
		in, err := s.Instance(r.PathValue("cloud"), r.PathValue("id"))
		return http.StatusOK, in, err
	}))
	mux.Handle("POST /admin/clouds/{cloud}/instances/{id}/gpu-faults", s.admin(func(r *http.Request) (int, any, error) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			return 0, nil, err
		}
		var f GPUFault
		if aerr := decode(body, &f); aerr != nil {
			return 0, nil, aerr
		}
		if err := s.InjectGPUFault(r.PathValue("cloud"), r.PathValue("id"), f); err != nil {
			return 0, nil, err
		}
		in, err := s.Instance(r.PathValue("cloud"), r.PathValue("id"))
		return http.StatusOK, in, err
	}))
	mux.Handle("GET /admin/clouds/{cloud}/volumes", s.admin(func(r *http.Request) (int, any, error) {
		v, err := s.Volumes(r.PathValue("cloud"))
		return http.StatusOK, map[string][]Volume{"volumes": v}, err
	}))
	mux.Handle("GET /admin/clouds/{cloud}/resources", s.admin(func(r *http.Request) (int, any, error) {
		res, err := s.SideResources(r.PathValue("cloud"))
		return http.StatusOK, res, err
	}))
	mux.Handle("GET /admin/clouds/{cloud}/stats", s.admin(func(r *http.Request) (int, any, error) {
		st, err := s.Stats(r.PathValue("cloud"))
		return http.StatusOK, st, err
	}))
}

// admin wraps an admin call: the admin token, and errors mapped to the
// API's error codes.
func (s *Server) admin(h func(r *http.Request) (int, any, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !bearer(r, s.adminToken) {
			writeError(w, errorf(http.StatusUnauthorized, CodeUnauthorized, "missing or invalid admin token"))
			return
		}
		status, v, err := h(r)
		var aerr *apiError
		switch {
		case err == nil:
			writeJSON(w, status, v)
			return
		case errors.As(err, &aerr):
		case errors.Is(err, ErrUnknownCloud), errors.Is(err, ErrNotFound):
			aerr = errorf(http.StatusNotFound, CodeNotFound, "%v", err)
		case errors.Is(err, ErrNotRunning):
			aerr = errorf(http.StatusConflict, CodeConflict, "%v", err)
		default:
			aerr = errorf(http.StatusBadRequest, CodeInvalidRequest, "%v", err)
		}
		writeError(w, aerr)
	})
}
