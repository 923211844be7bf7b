#!/bin/sh
# Makes the alias certificate fixtures (run once with OpenSSL 3.0; the outputs are
# committed, so the tests never need openssl). Pass phrase everywhere: gearlb-test.
set -eu
cd "$(dirname "$0")"
P=pass:gearlb-test
cert() { # cert <key> <out> <CN> <SAN>
  openssl req -x509 -new -key "$1" -out "$2" -days 3650 -subj "/CN=$3" \
    -addext "subjectAltName=$4" -addext "basicConstraints=critical,CA:FALSE"
}
# RSA 2048 for www.example.org: PKCS#1 and PKCS#8 plain.
openssl genrsa -out rsa.pk8.key 2048
openssl rsa -in rsa.pk8.key -traditional -out rsa.key
cert rsa.key rsa.crt www.example.org "DNS:www.example.org,DNS:example.org"
# Legacy encrypted PEM (Proc-Type/DEK-Info), as `openssl genrsa -des3` wrote it.
openssl rsa -in rsa.key -traditional -des3 -passout $P -out rsa.des3.key
openssl rsa -in rsa.key -traditional -aes128 -passout $P -out rsa.aes128.key
openssl rsa -in rsa.key -traditional -aes256 -passout $P -out rsa.aes256.key
# What the DES-EDE3-CBC key decrypts to, as OpenSSL decrypts it.
openssl rsa -in rsa.des3.key -passin $P -traditional -outform DER -out rsa.des3.der
# Encrypted PKCS#8: PBES2 AES-256-CBC + PBKDF2-HMAC-SHA256 (OpenSSL 1.1+ default) and
# DES-EDE3-CBC + PBKDF2-HMAC-SHA1 (OpenSSL 1.0's -v2 des3), then PKCS#12 PBE (1.0's default).
openssl pkcs8 -topk8 -in rsa.key -v2 aes-256-cbc -v2prf hmacWithSHA256 -passout $P -out rsa.pbes2-aes256.key
openssl pkcs8 -topk8 -in rsa.key -v2 des3 -v2prf hmacWithSHA1 -passout $P -out rsa.pbes2-des3-sha1.key
openssl pkcs8 -topk8 -in rsa.key -v1 PBE-SHA1-3DES -passout $P -out rsa.pkcs12-3des.key
# PBKDF2 with more iterations than gearlb derives (2 000 000 > 1 000 000).
openssl pkcs8 -topk8 -in rsa.key -v2 aes-256-cbc -iter 2000000 -passout $P -out rsa.pbes2-iter.key
# EC P-256 (SEC1, with its EC PARAMETERS block first), legacy AES-128 and AES-192.
openssl ecparam -name prime256v1 -genkey -out ec.key
cert ec.key ec.crt shop.example.net "DNS:shop.example.net"
openssl ec -in ec.key -aes128 -passout $P -out ec.aes128.key
openssl ec -in ec.key -aes192 -passout $P -out ec.aes192.key
# Another RSA key: does not match rsa.crt.
openssl genrsa -traditional -out other.key 2048
# RSA 1024: too small for ring.
openssl genrsa -traditional -out rsa1024.key 1024
cert rsa1024.key rsa1024.crt old.example.org "DNS:old.example.org"
# DSA (the broker accepted it; rustls cannot serve it).
openssl dsaparam -out dsa.params 2048
openssl gendsa -out dsa.pk8.key dsa.params
openssl dsa -in dsa.pk8.key -traditional -out dsa.key 2>/dev/null || openssl dsa -in dsa.pk8.key -out dsa.key
rm dsa.params
cert dsa.key dsa.crt dsa.example.org "DNS:dsa.example.org"
# A chain: leaf (chain.key) signed by a CA, leaf first.
openssl ecparam -name prime256v1 -genkey -noout -out ca.key
openssl req -x509 -new -key ca.key -out ca.crt -days 3650 -subj "/CN=gearlb test CA"
openssl ecparam -name prime256v1 -genkey -noout -out chain.key
openssl req -new -key chain.key -subj "/CN=api.example.org" -out chain.csr
printf 'subjectAltName=DNS:api.example.org\nbasicConstraints=critical,CA:FALSE\n' > chain.ext
openssl x509 -req -in chain.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
  -extfile chain.ext -out chain.leaf.crt
cat chain.leaf.crt ca.crt > chain.crt
rm chain.csr chain.ext chain.leaf.crt ca.srl ca.key
# The platform's wildcard (the default certificate of the runtime SNI test).
openssl ecparam -name prime256v1 -genkey -noout -out wildcard.key
cert wildcard.key wildcard.crt "*.example.com" "DNS:*.example.com"
# Other key types: Ed25519 and P-384 are served; P-521 is not (ring signs on P-256/384).
openssl genpkey -algorithm ed25519 -out ed25519.key
cert ed25519.key ed25519.crt ed.example.org "DNS:ed.example.org"
openssl ecparam -name secp384r1 -genkey -noout -out p384.key
cert p384.key p384.crt p384.example.org "DNS:p384.example.org"
openssl ecparam -name secp521r1 -genkey -noout -out p521.key
cert p521.key p521.crt p521.example.org "DNS:p521.example.org"
# PBES2 with scrypt (small N, so that debug-build tests stay quick).
openssl pkcs8 -topk8 -in rsa.key -scrypt -scrypt_N 1024 -scrypt_r 8 -scrypt_p 1 -passout $P -out rsa.pbes2-scrypt.key
