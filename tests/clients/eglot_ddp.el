;;; eglot_ddp.el --- Emacs (batch) + eglot driving the ddp-lint language server  -*- lexical-binding: t -*-
;; configured by the eglot snippet copied verbatim out of docs/editors.md (DDP_SNIPPET).
;; Run: DDP_FILE=... DDP_SNIPPET=... DDP_RESULT=... HOME=<tmp> emacs --batch -Q -l eglot_ddp.el
;; (`ddp-lint` must be on PATH, as the snippet expects.)
;; Exit status 0 = pass; the result file gets one "key value" line per step.
(require 'package)                     ; -Q skips site-lisp: activate Debian's elpa-* packages
(add-to-list 'package-directory-list "/usr/share/emacs/site-lisp/elpa")
(package-initialize)
(load-file (getenv "DDP_SNIPPET"))      ; the user's init.el: the docs' snippet, as it stands
(require 'eglot)
(require 'flymake)
(require 'python)

(defvar ddp-file (getenv "DDP_FILE"))
(defvar ddp-result (getenv "DDP_RESULT"))

(defun ddp-say (key value)
  (append-to-file (format "%s %s\n" key value) nil ddp-result))

(defun ddp-fail (fmt &rest args)
  (let ((msg (apply #'format fmt args)))
    (ddp-say "FAIL" msg)
    (princ (concat "FAIL: " msg "\n") #'external-debugging-output)
    (kill-emacs 1)))

(defun ddp-wait (pred secs)
  (let ((deadline (+ (float-time) secs)))
    (while (and (not (funcall pred)) (< (float-time) deadline))
      (accept-process-output nil 0.05))
    (funcall pred)))

(defun ddp-diag (code)
  "The flymake diagnostic whose text names CODE, or nil."
  (flymake-start nil t)
  (cl-find-if (lambda (d) (string-match-p (regexp-quote (format "[%s]" code)) (flymake-diagnostic-text d)))
              (flymake-diagnostics)))

(condition-case err
    (progn
      (let ((entry (car eglot-server-programs)))  ; the snippet's entry comes first
        (unless (equal (cadr entry) "ddp-lint") (ddp-fail "the snippet did not add ddp-lint: %S" entry))
        (ddp-say "contact" (format "%S" (cdr entry))))
      (setq eglot-sync-connect 60
            eglot-confirm-server-initiated-edits nil
            eglot-autoshutdown nil)
      (find-file ddp-file)
      (python-mode)
      (apply #'eglot (eglot--guess-contact))  ; transient project = the file's folder
      (unless (ddp-wait #'eglot-managed-p 60) (ddp-fail "eglot did not manage the buffer"))

      ;; 1. both diagnostics, at the right lines
      (unless (ddp-wait (lambda () (and (ddp-diag "DDP001") (ddp-diag "DDP101"))) 60)
        (ddp-fail "no DDP001 + DDP101 within 60 s: %S" (mapcar #'flymake-diagnostic-text (flymake-diagnostics))))
      (dolist (code '("DDP001" "DDP101"))
        (let ((d (ddp-diag code)))
          (ddp-say code (format "%d:%d %s" (line-number-at-pos (flymake-diagnostic-beg d))
                                (save-excursion (goto-char (flymake-diagnostic-beg d)) (current-column))
                                (flymake-diagnostic-type d)))))

      ;; 2. apply each quick fix with eglot's own workspace-edit machinery
      (dolist (code '("DDP001" "DDP101"))
        (let* ((d (or (ddp-diag code) (ddp-fail "%s disappeared before its fix" code)))
               (beg (flymake-diagnostic-beg d))
               (actions (eglot-code-actions beg (1+ beg) "quickfix"))
               (action (cl-find-if (lambda (a) (and (eq (plist-get a :isPreferred) t)
                                                   (string-match-p (regexp-quote code) (plist-get a :title))))
                                   actions)))
          (unless action (ddp-fail "no preferred quick fix for %s: %S" code actions))
          (ddp-say "action" (plist-get action :title))
          (eglot--apply-workspace-edit (plist-get action :edit))
          ;; eglot sends didChange from an idle timer, and batch Emacs is never idle: flush it
          (eglot--signal-textDocument/didChange)
          (unless (ddp-wait (lambda () (null (ddp-diag code))) 20)
            (ddp-fail "%s still reported after its fix" code))))

      ;; 3. save
      (save-buffer)
      (ddp-say "written" "yes")
      (eglot-shutdown (eglot-current-server))
      (ddp-say "PASS" "yes")
      (kill-emacs 0))
  (error (ddp-fail "%S" err)))
